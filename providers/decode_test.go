package providers_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/go-viper/mapstructure/v2"

	"github.com/notifier/notifier/providers"
)

// TestConfigDecodesFromYAMLKeys decodes the `providers:` list of SPEC §4 the
// way the command line does (viper hands mapstructure a map; unknown keys
// fail), so every key documented for Config has the right tag.
func TestConfigDecodesFromYAMLKeys(t *testing.T) {
	t.Parallel()
	raw := []map[string]any{
		{"name": "sms-gateway", "channel": "sms", "default": true, "kind": "webhook", "url": "http://127.0.0.1:8080/send",
			"rate": 100, "unit": "messages", "max_queue_delay": "5s", "timeout": "5s", "credentials_env": "SMS_TOKEN",
			"retry_on_timeout": false},
		{"name": "push", "channel": "push", "default": true, "kind": "fcm", "url": "https://fcm.googleapis.com",
			"project_id": "my-project", "credentials_env": "FCM_TOKEN", "rate": 500, "max_queue_delay": "2s"},
		{"name": "tw", "channel": "sms", "kind": "twilio", "account_sid": "AC1", "from": "+15005550006",
			"messaging_service_sid": "MG1", "rate": 1.5, "unit": "segments", "status_callback_url": "https://hooks.example.com/twilio"},
		{"name": "ios", "channel": "push", "kind": "apns", "key_file": "k.p8", "key_id": "K", "team_id": "T",
			"topic": "com.example", "push_type": "alert", "priority": 5, "rate": 1, "tls_ca_file": "ca.pem"},
		{"name": "mail", "channel": "email", "default": true, "kind": "smtp", "host": "smtp.example.com", "port": 2525,
			"from": "a@example.com", "username": "u", "password_env": "SMTP_PASSWORD", "rate": 1},
		{"name": "push-sa", "channel": "push", "kind": "fcm", "project_id": "my-project", "credentials_file": "/etc/fcm.json", "rate": 1},
	}
	var cfgs []providers.Config
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		DecodeHook:       mapstructure.StringToTimeDurationHookFunc(),
		ErrorUnused:      true,
		WeaklyTypedInput: true,
		Result:           &cfgs,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := dec.Decode(raw); err != nil {
		t.Fatalf("decode: %v", err)
	}
	want := []providers.Config{
		{Name: "sms-gateway", Channel: "sms", Default: true, Kind: "webhook", URL: "http://127.0.0.1:8080/send", Rate: 100,
			Unit: "messages", MaxQueueDelay: 5 * time.Second, Timeout: 5 * time.Second, CredentialsEnv: "SMS_TOKEN"},
		{Name: "push", Channel: "push", Default: true, Kind: "fcm", URL: "https://fcm.googleapis.com", ProjectID: "my-project",
			CredentialsEnv: "FCM_TOKEN", Rate: 500, MaxQueueDelay: 2 * time.Second},
		{Name: "tw", Channel: "sms", Kind: "twilio", AccountSID: "AC1", From: "+15005550006", MessagingServiceSID: "MG1",
			Rate: 1.5, Unit: "segments", StatusCallbackURL: "https://hooks.example.com/twilio"},
		{Name: "ios", Channel: "push", Kind: "apns", KeyFile: "k.p8", KeyID: "K", TeamID: "T", Topic: "com.example",
			PushType: "alert", Priority: 5, Rate: 1, TLSCAFile: "ca.pem"},
		{Name: "mail", Channel: "email", Default: true, Kind: "smtp", Host: "smtp.example.com", Port: 2525,
			From: "a@example.com", Username: "u", PasswordEnv: "SMTP_PASSWORD", Rate: 1},
		{Name: "push-sa", Channel: "push", Kind: "fcm", ProjectID: "my-project", CredentialsFile: "/etc/fcm.json", Rate: 1},
	}
	if len(cfgs) != len(want) {
		t.Fatalf("decoded %d entries", len(cfgs))
	}
	if cfgs[0].RetryOnTimeout == nil || cfgs[0].RetriesOnTimeout() {
		t.Errorf("retry_on_timeout: false decoded as %v", cfgs[0].RetryOnTimeout)
	}
	cfgs[0].RetryOnTimeout = nil // a pointer: compared apart
	if !cfgs[1].RetriesOnTimeout() {
		t.Error("retry_on_timeout left out: RetriesOnTimeout() = false, want the default true")
	}
	for i := range want {
		if !reflect.DeepEqual(cfgs[i], want[i]) {
			t.Errorf("entry %d decoded as\n %+v\nwant\n %+v", i, cfgs[i], want[i])
		}
	}
	// The fcm entry lacks nothing Validate needs; twilio lacks credentials_env.
	if err := cfgs[1].Validate(); err != nil {
		t.Errorf("fcm entry: %v", err)
	}
	if err := cfgs[2].Validate(); err == nil {
		t.Error("twilio entry without credentials_env validated")
	}
}
