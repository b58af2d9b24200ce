package cli

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/term"

	"github.com/notifier/notifier/internal/text"
)

// defaultWidth is the width of an output whose width is unknown.
const defaultWidth = 80

// termWidth is the number of columns w shows: the terminal's when w is
// one, else the COLUMNS variable's when it holds a number, else 80.
func termWidth(w io.Writer, getenv func(string) string) int {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
			return cols
		}
	}
	if n, err := strconv.Atoi(strings.TrimSpace(getenv("COLUMNS"))); err == nil && n > 0 {
		return n
	}
	return defaultWidth
}

// tableCol is a column of a table: its heading, its alignment, and when
// it goes if the table is too wide (0: never; the highest goes first,
// the rightmost of equals). A column with spill set is not lost when it
// goes: a row's cell other than none is printed under the row, as
// "  <head>: <cell>".
type tableCol struct {
	head  string
	right bool
	drop  int
	spill bool
	none  string
}

// tableRow is a row's cells and the free lines printed under it (each
// cut to the width).
type tableRow struct {
	cells []string
	under []string
}

// writeTable prints a heading line and rows in aligned columns two
// spaces apart, each line starting with indent and no line wider than
// width: columns are dropped in their order (and those that fit again
// once a wider one went are taken back), then the first column's cells
// are cut, then any line still too wide.
func writeTable(w io.Writer, width int, indent string, cols []tableCol, rows []tableRow) {
	widths := make([]int, len(cols))
	for i, c := range cols {
		widths[i] = text.Columns(c.head)
		for _, r := range rows {
			widths[i] = max(widths[i], text.Columns(r.cells[i]))
		}
	}
	kept := make([]bool, len(cols))
	for i := range kept {
		kept[i] = true
	}
	total := func() int {
		n, k := text.Columns(indent), 0
		for i := range cols {
			if kept[i] {
				n += widths[i]
				k++
			}
		}
		return n + 2*max(k-1, 0)
	}
	var dropped []int
	for total() > width {
		worst := -1
		for i, c := range cols {
			if kept[i] && c.drop > 0 && (worst < 0 || c.drop >= cols[worst].drop) {
				worst = i
			}
		}
		if worst < 0 {
			break
		}
		kept[worst] = false
		dropped = append(dropped, worst)
	}
	for i := len(dropped) - 1; i >= 0; i-- { // the most wanted first
		kept[dropped[i]] = true
		if total() > width {
			kept[dropped[i]] = false
		}
	}
	if over := total() - width; over > 0 {
		widths[0] = max(widths[0]-over, min(widths[0], 6))
	}
	line := func(cells []string) string {
		var b strings.Builder
		b.WriteString(indent)
		first := true
		for i, c := range cells {
			if !kept[i] {
				continue
			}
			if !first {
				b.WriteString("  ")
			}
			first = false
			c = text.Fit(c, widths[i])
			pad := strings.Repeat(" ", widths[i]-text.Columns(c))
			if cols[i].right {
				b.WriteString(pad + c)
			} else {
				b.WriteString(c + pad)
			}
		}
		return text.Fit(strings.TrimRight(b.String(), " "), width)
	}
	heads := make([]string, len(cols))
	for i, c := range cols {
		heads[i] = c.head
	}
	fmt.Fprintln(w, line(heads))
	for _, r := range rows {
		fmt.Fprintln(w, line(r.cells))
		for i, c := range cols {
			if !kept[i] && c.spill && r.cells[i] != c.none {
				fmt.Fprintln(w, text.Fit(indent+"  "+c.head+": "+r.cells[i], width))
			}
		}
		for _, u := range r.under {
			fmt.Fprintln(w, text.Fit(u, width))
		}
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
