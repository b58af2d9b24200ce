package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/internal/text"
	"github.com/notifier/notifier/limits/suppress"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
)

func suppressionCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "suppression",
		Short: "List, show or remove the recipients providers refused as gone (the suppression list)",
		Long: `A recipient a provider refused as gone for good — an unregistered device token (APNs 410,
FCM UNREGISTERED), a number that replied STOP or is no mobile number (Twilio 21610,
21211, 21614), a mailbox that does not exist (SMTP 550 5.1.1), a webhook's 410 Gone — is
put on the fleet's suppression list for suppression.ttl (default 30 days): its later
jobs end suppressed (reason suppressed_recipient) without a provider request.

The list holds a hash of each address (SHA-256 of the channel and the address, an email
address in lower case), never the address: give the address with --to and the channel with
--channel to find one. A --to that is no address of the channel exits 2.

  notifier suppression list [--channel C] [--limit N] [--json]
  notifier suppression show --channel C --to ADDRESS [--json]
  notifier suppression remove --channel C --to ADDRESS   (at once, fleet-wide: a user
                                                            who reinstalled the app, a
                                                            number that texted START)`,
		Args: cobra.NoArgs,
	}
	c.AddCommand(suppressionListCmd(e), suppressionShowCmd(e, false), suppressionShowCmd(e, true))
	return c
}

// suppressionStore opens the fleet's list as the configuration at path
// names it.
func suppressionStore(cmd *cobra.Command, e *env, path string) (*suppress.Redis, func(), error) {
	cfg, err := config.Load(path, e.getenv)
	if err != nil {
		return nil, nil, err
	}
	if cfg.SuppressTTL() == 0 {
		fmt.Fprintln(e.stderr, "note: suppression.ttl is 0 in this configuration: the fleet keeps no suppression list")
	}
	rdb, err := config.ConnectRedis(cmd.Context(), cfg.Redis, 2)
	if err != nil {
		return nil, nil, err
	}
	return suppress.NewRedis(rdb, cfg.Redis.KeyPrefix), func() { rdb.Close() }, nil
}

func suppressionListCmd(e *env) *cobra.Command {
	c := &cobra.Command{Use: "list", Short: "The recipients on the suppression list, the most recent first", Args: cobra.NoArgs}
	path := configFlag(c)
	channel := c.Flags().String("channel", "", "only this channel's")
	limit := c.Flags().Int("limit", 100, "at most this many (0: all)")
	asJSON := c.Flags().Bool("json", false, "print the entries as a JSON array")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if *channel != "" && !queue.IsChannel(*channel) {
			return &usageError{err: fmt.Errorf("--channel %q is not one of sms, push, email", text.Printable(text.Fit(*channel, 32)))}
		}
		if *limit < 0 {
			return &usageError{err: fmt.Errorf("--limit must not be negative, got %d", *limit)}
		}
		list, done, err := suppressionStore(cmd, e, *path)
		if err != nil {
			return err
		}
		defer done()
		es, err := list.List(cmd.Context(), *channel, *limit)
		if err != nil {
			return err
		}
		if *asJSON {
			if es == nil {
				es = []suppress.Entry{}
			}
			return writeJSON(e.stdout, es)
		}
		if len(es) == 0 {
			fmt.Fprintln(e.stdout, "no recipient is suppressed")
			return nil
		}
		for _, s := range es {
			writeEntry(e.stdout, s, "")
		}
		return nil
	}
	return c
}

// suppressionShowCmd is `suppression show` or, with remove, `suppression
// remove`.
func suppressionShowCmd(e *env, remove bool) *cobra.Command {
	c := &cobra.Command{Use: "show", Short: "Whether a recipient is on the suppression list, and why", Args: cobra.NoArgs}
	if remove {
		c = &cobra.Command{Use: "remove", Short: "Take a recipient off the suppression list, fleet-wide, at once", Args: cobra.NoArgs}
	}
	path := configFlag(c)
	channel := c.Flags().String("channel", "", "the recipient's channel: sms, push or email (required)")
	to := c.Flags().String("to", "", "the recipient's address: a phone number, device token or email address (required)")
	var asJSON *bool
	if !remove {
		asJSON = c.Flags().Bool("json", false, "print the entry as JSON (null when not listed)")
	}
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		switch {
		case !queue.IsChannel(*channel):
			return &usageError{err: fmt.Errorf("--channel must be one of sms, push, email, got %q", text.Printable(text.Fit(*channel, 32)))}
		case *to == "":
			return &usageError{err: fmt.Errorf("--to is required: the recipient's address")}
		}
		if err := checkTo(*channel, *to); err != nil {
			return &usageError{err: err}
		}
		list, done, err := suppressionStore(cmd, e, *path)
		if err != nil {
			return err
		}
		defer done()
		h := suppress.Hash(*channel, *to)
		masked := providers.Mask(*channel, *to)
		if remove {
			removed, err := list.Remove(cmd.Context(), *channel, h)
			if err != nil {
				return err
			}
			if !removed {
				fmt.Fprintf(e.stdout, "%s %s was not on the suppression list\n", *channel, masked)
				return nil
			}
			fmt.Fprintf(e.stdout, "%s %s removed from the suppression list: its next job is sent\n", *channel, masked)
			return nil
		}
		s, ok, err := list.Get(cmd.Context(), *channel, h)
		if err != nil {
			return err
		}
		if *asJSON {
			if !ok {
				_, err := fmt.Fprintln(e.stdout, "null")
				return err
			}
			return writeJSON(e.stdout, s)
		}
		if !ok {
			fmt.Fprintf(e.stdout, "%s %s is not on the suppression list\n", *channel, masked)
			return nil
		}
		writeEntry(e.stdout, s, masked)
		return nil
	}
	return c
}

// checkTo refuses an address no job of channel could have had (so none is
// on the list): queue's own rule for a job's to, which never echoes it.
func checkTo(channel, to string) error {
	j := queue.Job{ID: "x", UserID: "x", Channel: channel, To: to}
	var ie *queue.InvalidError
	if err := j.Validate(); errors.As(err, &ie) && ie.Field == "to" {
		return fmt.Errorf("--to is no %s address: it %s", channel, ie.Rule)
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeEntry prints one entry: its recipient as masked (when the address
// was given) or as the start of its hash, never the address.
func writeEntry(w io.Writer, s suppress.Entry, masked string) {
	who := masked
	if who == "" {
		who = "#" + s.Hash[:12]
	}
	fmt.Fprintf(w, "%-5s %-24s until %s (%s left): %s refused it as gone at %s — %s\n",
		s.Channel, who, s.Until.Format(time.RFC3339), time.Until(s.Until).Round(time.Minute), s.Provider,
		s.At.Format(time.RFC3339), text.OneLine(s.Detail, 200))
}
