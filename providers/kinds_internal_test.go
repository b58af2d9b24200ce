package providers

import (
	"reflect"
	"slices"
	"testing"
)

// commonKeys are the keys every kind takes: no kind may list one in its
// keys (it would be refused on every other kind).
var commonKeys = []string{"name", "channel", "default", "kind", "rate", "unit", "max_queue_delay", "timeout",
	"jitter_budget", "max_pause", "retry_on_timeout", "fallback", "reserve", "adaptive", "quotas", "probe_interval"}

// TestKindsTable holds every entry of kinds to what Validate, WithDefaults
// and NewRegistry rely on.
func TestKindsTable(t *testing.T) {
	t.Parallel()
	fields := map[string]reflect.Kind{} // Config's keys and their Go kinds
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Config]()) {
		fields[f.Tag.Get("mapstructure")] = f.Type.Kind()
	}
	listed := map[string]bool{}
	var names []string
	for _, k := range kinds {
		if k.name == "" || slices.Contains(names, k.name) {
			t.Errorf("kind %q: empty or listed twice", k.name)
		}
		names = append(names, k.name)
		if k.channel != "" && !slices.Contains(channelNames, k.channel) {
			t.Errorf("kind %s: channel %q is not one of %v", k.name, k.channel, channelNames)
		}
		if k.build == nil {
			t.Errorf("kind %s: no build", k.name)
		}
		for i, key := range k.keys {
			// refuseOtherKeys takes the zero value for left out: a string
			// or a number, never a pointer, slice or map.
			switch gk, ok := fields[key]; {
			case !ok:
				t.Errorf("kind %s: key %q is not a Config key", k.name, key)
			case gk != reflect.String && gk != reflect.Int:
				t.Errorf("kind %s: key %q is a %s; kind-specific keys are strings or ints", k.name, key, gk)
			}
			if slices.Contains(commonKeys, key) {
				t.Errorf("kind %s: key %q is one every kind takes", k.name, key)
			}
			if slices.Contains(k.keys[:i], key) {
				t.Errorf("kind %s: key %q listed twice", k.name, key)
			}
			listed[key] = true
		}
		if k.defaults != nil {
			// A kind fills in its own keys only.
			zero := Config{Kind: k.name}
			filled := zero
			k.defaults(&filled)
			zv, fv := reflect.ValueOf(zero), reflect.ValueOf(filled)
			for i := range zv.NumField() {
				key := zv.Type().Field(i).Tag.Get("mapstructure")
				if !reflect.DeepEqual(zv.Field(i).Interface(), fv.Field(i).Interface()) && !slices.Contains(k.keys, key) {
					t.Errorf("kind %s: defaults fill %s, not one of its keys", k.name, key)
				}
			}
		}
	}
	for key := range fields {
		if !listed[key] && !slices.Contains(commonKeys, key) {
			t.Errorf("Config key %q is neither one every kind takes nor listed by a kind", key)
		}
	}
}

// TestKindsRefuseOtherKeys: an entry setting other kinds' keys is told of
// each, in the order of Config's fields, and of the kinds that take it;
// keys every kind takes are never refused. (TestValidate pins "used by"
// lists of several kinds, in the order of kinds.)
func TestKindsRefuseOtherKeys(t *testing.T) {
	t.Parallel()
	c := Config{Name: "dev", Channel: "sms", Kind: "log", Rate: 1, Timeout: 1, Port: 25, AccountSID: "AC1", ProjectID: "p"}
	p := &problems{kind: c.Kind}
	k, _ := kindNamed("log")
	k.refuseOtherKeys(c, p)
	var got []string
	for _, err := range p.errs {
		got = append(got, err.Error())
	}
	want := []string{
		"project_id: not used by kind log (used by fcm)",
		"account_sid: not used by kind log (used by twilio)",
		"port: not used by kind log (used by smtp)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("refuseOtherKeys:\n%q\nwant\n%q", got, want)
	}
}
