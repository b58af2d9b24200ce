package queue

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecodeFastPath: whenever the fast path accepts a message, the strict
// path accepts it too and reads exactly the same job; the fast path never
// accepts what the strict path refuses. Seeds: FuzzDecode's corpus and the
// rows of the decode tables.
func FuzzDecodeFastPath(f *testing.F) {
	for _, s := range decodeSeeds() {
		f.Add("notify.jobs.sms", []byte(s))
		f.Add("notify.jobs.push.high", []byte(s))
	}
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		fast, ok, _ := decodeFast(fromSubject(subject), data, nil)
		strict, err := decodeStrict(fromSubject(subject), data, nil)
		if !ok {
			return
		}
		if err != nil {
			t.Fatalf("fast path accepted what the strict path refuses (%v): %q", err, data)
		}
		if !reflect.DeepEqual(fast, strict) {
			t.Fatalf("fast and strict paths disagree on %q:\nfast   %#v\nstrict %#v", data, fast, strict)
		}
	})
}

// FuzzTenantFieldAgreesWithDecode: whenever a job on a plain subject
// decodes, the tenant a delivery is taken to be (tenantField: the ledger
// key, the provider's tenant, the fair lane) is the tenant the decoder
// read. A name written with escapes, or another member repeated, made
// tenantField read none while the decoder read the tenant: the job was
// handled as the default tenant's (found in review).
func FuzzTenantFieldAgreesWithDecode(f *testing.F) {
	for _, s := range decodeSeeds() {
		f.Add([]byte(s))
	}
	for _, s := range tenantFieldSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := Decode("notify.jobs.sms", data)
		if err != nil {
			return
		}
		if got := tenantField(data); got != j.Tenant {
			t.Fatalf("tenantField %q, the decoder %q, of %q", got, j.Tenant, data)
		}
	})
}

// tenantFieldSeeds name a tenant in the ways a JSON encoder may write it.
var tenantFieldSeeds = []string{
	`{"id":"x","user_id":"u","channel":"sms","to":"+447700900124","body":"b","tenant":"acme"}`,
	`{"id":"x","user_id":"u","channel":"sms","to":"+447700900124","body":"b","tena\u006et":"acme"}`,
	`{"id":"x","user_id":"u","channel":"sms","to":"+447700900124","body":"b","\u0074enant":"\u0061cme"}`,
	`{"id":"x","user_id":"u","channel":"sms","to":"+447700900124","body":"b","t\u0065\u006Eant":"acme"}`,
	`{"id":"x","user_id":"u","channel":"sms","to":"+447700900124","body":"fish \u0026 chips","tenant":"acme"}`,
	`{"id":"x","user_id":"u","channel":"sms","to":"+447700900124","body":"fish \u0026 chips \u003cb\u003e"}`,
	`{"id":"x","user_id":"u","channel":"sms","to":"+447700900124","body":"b","tenant":"acme","note":"a","note":"b"}`,
	`{"id":"x","user_id":"u","channel":"sms","to":"+447700900124","body":"\ud800 b","tenant":"acme"}`,
	`{"id":"x","user_id":"u","channel":"sms","to":"+447700900124","body":"b","data":{"tenant":"other"}}`,
	`{"id":"x","user_id":"u","channel":"sms","to":"+447700900124","body":"b","Tenant":"acme"}`,
	` { "tenant" : "acme" , "id":"x","user_id":"u","channel":"sms","to":"+447700900124","body":"b" } `,
}

// TestTenantFieldReadsLittle: a default tenant's job, escapes in its body
// included (Go's encoder writes & < > as U+0026 U+003C U+003E escapes),
// costs tenantField a search of its bytes and no allocation: every such
// job takes this path.
func TestTenantFieldReadsLittle(t *testing.T) {
	data := []byte(`{"id":"x","user_id":"u","channel":"sms","to":"+447700900124","body":"fish \u0026 chips \u003cb\u003e \u00e9t\u00e9"}`)
	if n := testing.AllocsPerRun(100, func() { _ = tenantField(data) }); n != 0 {
		t.Errorf("tenantField of a job naming no tenant: %v allocations, want 0", n)
	}
	for _, esc := range []string{`\u0074`, `\u0065`, `\u006e`, `\u006E`, `\u0061`} {
		if !escapesATenantLetter([]byte(`{"` + esc + `"`)) {
			t.Errorf("%s: not taken for an escaped letter of tenant", esc)
		}
	}
	if escapesATenantLetter(data) {
		t.Error("an escaped & < > or é taken for an escaped letter of tenant")
	}
}

// TestTenantFieldAgreesWithDecode runs FuzzTenantFieldAgreesWithDecode's
// seeds in every test run, and checks that each seed decodes.
func TestTenantFieldAgreesWithDecode(t *testing.T) {
	for _, s := range tenantFieldSeeds {
		j, err := Decode("notify.jobs.sms", []byte(s))
		if err != nil {
			t.Errorf("seed %s: %v", s, err)
			continue
		}
		if got := tenantField([]byte(s)); got != j.Tenant {
			t.Errorf("tenantField %q, the decoder %q, of %s", got, j.Tenant, s)
		}
	}
}

// decodeSeeds are messages worth starting from: valid jobs and the
// corner cases the strict path was written for.
func decodeSeeds() []string {
	seeds := []string{
		`{"id":"a1","user_id":"u","channel":"sms","to":"+447700900123","body":"hi"}`,
		`{"id":"a1","user_id":"u","channel":"push","to":"tok_abcdefgh","body":"hi","title":"t","data":{"k":"v"},"provider":"p","expires_at":"2030-01-01T00:00:00Z","created_at":"2026-01-01T00:00:00+01:00"}`,
		`{"id":"a1","ID":"b","user_id":"u","channel":"sms","to":"+447700900123","body":"hi"}`,
		`{"id":"a1","id":"a2","user_id":"u","channel":"sms","to":"+447700900123","body":"hi"}`,
		`{"id":"a1","user_id":"u","channel":"sms","to":"+447700900123","body":"hi","x":1,"x":2}`,
		`{"id":"a1","user_id":"u","channel":"sms","to":"+447700900123","body":"hi","data":{}}`,
		`{"id":"a1","user_id":"u","channel":"sms","to":"+447700900123","body":"hi","data":null,"title":null}`,
		`{"id":"a1","user_id":"u","channel":"sms","to":"+447700900123","body":"\ud800"}`,
		`{"id":"a1","user_id":"u","channel":"sms","to":"+447700900123","body":"hi"} `,
		`{"id":"a1","user_id":"u","channel":"sms","to":"+447700900123","body":"hi"}{}`,
		`{"id":"a1","user_id":"u","channel":"sms","to":"+447700900123","body":"hi","expires_at":"2030-01-01T00:00:00.123456789Z"}`,
		`{"id":"a1","user_id":"u","channel":"email","to":"a@example.com","body":"hi","data":{"a":"1","a":"2"}}`,
		`{"id":"a1","user_id":"u","channel":"email","to":"a@example.com","body":"hi","data":{"a":null}}`,
		`{"id":null,"user_id":"u","channel":"sms","to":"+447700900123","body":"hi"}`,
		`{"id":"a1","user_id":"u","channel":"sms","to":"+447700900123","body":"hi","expires_at":null,"created_at":""}`,
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzDecode", "*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// go test fuzz v1 corpus: a line []byte("...") holds the message.
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "[]byte("); ok {
				seeds = append(seeds, unquoteSeed(strings.TrimSuffix(v, ")")))
			}
		}
	}
	return seeds
}

func unquoteSeed(q string) string {
	var out strings.Builder
	if len(q) < 2 {
		return q
	}
	q = q[1 : len(q)-1]
	for i := 0; i < len(q); i++ {
		if q[i] == '\\' && i+1 < len(q) {
			i++
			switch q[i] {
			case 'n':
				out.WriteByte('\n')
			case 't':
				out.WriteByte('\t')
			default:
				out.WriteByte(q[i])
			}
			continue
		}
		out.WriteByte(q[i])
	}
	return out.String()
}

func BenchmarkDecodeStrictPath(b *testing.B) {
	data := []byte(`{"id":"job-123456","user_id":"user-42","channel":"sms","to":"+447700900123","body":"Your code is 123456","created_at":"2026-12-02T10:00:00Z"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeStrict(fromSubject("notify.jobs.sms"), data, nil); err != nil {
			b.Fatal(err)
		}
	}
}
