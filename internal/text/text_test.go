package text

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestOneLine(t *testing.T) {
	for _, c := range []struct {
		in    string
		limit int
		want  string
	}{
		{"plain", 100, "plain"},
		{"  two\r\nlines\t here ", 100, "two lines here"},
		{"bad \xff byte", 100, "bad \uFFFD byte"},
		{"sep\u2028arated", 100, "sep arated"},
		{"ééééé", 7, "éé…"}, // 10 bytes cut to 7: two é (4) and the mark (3)
		{strings.Repeat("a", 20), 7, "aaaa…"},
	} {
		if got := OneLine(c.in, c.limit); got != c.want {
			t.Errorf("OneLine(%q, %d) = %q, want %q", c.in, c.limit, got, c.want)
		}
	}
}

// FuzzOneLine: the result is valid UTF-8, one line, within the limit.
func FuzzOneLine(f *testing.F) {
	for _, s := range []string{"", "a\nb", "ééé", "\xff\xfe", "x\u2029y"} {
		f.Add(s, 5)
	}
	f.Fuzz(func(t *testing.T, s string, limit int) {
		limit = max(len(Ellipsis), limit%300)
		got := OneLine(s, limit)
		if !utf8.ValidString(got) || strings.ContainsAny(got, "\r\n\u2028\u2029") || len(got) > limit {
			t.Fatalf("OneLine(%q, %d) = %q", s, limit, got)
		}
	})
}

func TestFitAndFirstFitting(t *testing.T) {
	if got := Fit("hello world", 7); got != "hello…" {
		t.Errorf("Fit = %q", got)
	}
	if got := Fit("short", 10); got != "short" {
		t.Errorf("Fit of a short string = %q", got)
	}
	if got := FirstFitting(6, "too long here", "short", "s"); got != "short" {
		t.Errorf("FirstFitting = %q", got)
	}
	if got := FirstFitting(3, "long one", "longer"); got != "lo…" {
		t.Errorf("FirstFitting with none fitting = %q", got)
	}
}

func TestSplitList(t *testing.T) {
	got := SplitList(" a:1, ,b:2,,c ")
	if len(got) != 3 || got[0] != "a:1" || got[1] != "b:2" || got[2] != "c" {
		t.Errorf("SplitList = %q", got)
	}
	if SplitList("") != nil {
		t.Error("SplitList of nothing is not nil")
	}
}

func TestDuration(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{24 * time.Hour, "24h"}, {8784 * time.Hour, "8784h"}, {10 * time.Minute, "10m"}, {90 * time.Second, "1m30s"},
		{time.Hour + time.Second, "1h0m1s"}, {15 * time.Millisecond, "15ms"}, {0, "0s"},
	} {
		if got := Duration(c.d); got != c.want {
			t.Errorf("Duration(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}
