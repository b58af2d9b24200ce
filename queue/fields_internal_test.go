package queue

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestFieldsCoverJob: every field of Job has its row in fields, under its
// JSON name and in Job's order, and the row's at points at that field, so
// that a field added to Job without its rule (and so unread by the strict
// decoder and unwritten by encode) fails here, as does one of a type
// they do not know.
func TestFieldsCoverJob(t *testing.T) {
	t.Parallel()
	jt := reflect.TypeFor[Job]()
	if len(fields) != jt.NumField() {
		t.Fatalf("fields has %d rows for Job's %d fields", len(fields), jt.NumField())
	}
	var j Job
	jv := reflect.ValueOf(&j).Elem()
	for i, f := range fields {
		sf := jt.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if f.name != name {
			t.Errorf("row %d is %q, Job's field %d (%s) is %q", i, f.name, i, sf.Name, name)
		}
		if got, want := reflect.ValueOf(f.at(&j)).Pointer(), jv.Field(i).Addr().Pointer(); got != want {
			t.Errorf("row %q points at another field than Job.%s", f.name, sf.Name)
		}
		switch f.at(&j).(type) {
		case *string, *Category, *map[string]string, *time.Time: // what decodeStrict and encode read and write
		default:
			t.Errorf("row %q is a %s: teach decodeStrict and encode its type", f.name, sf.Type)
		}
		if f.check == nil {
			t.Errorf("row %q has no rule", f.name)
		}
	}
}
