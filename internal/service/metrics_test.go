package service

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsPortOneClientCannotHoldIt: the metrics port may face the
// internet (Twilio's status callbacks), and it held at most 64 connections
// with nothing else: whoever held them had the port. One client that opened
// 300 sockets and sent nothing (each held until the header timeout, the rest
// waiting in the listen backlog ahead of everyone), or kept 64 connections
// alive with a /healthz now and then, or held 64 slow requests (an /explain
// reads up to 100,000 messages), left Prometheus and Twilio waiting in the
// backlog, for good while it went on (found in review). A scrape from
// another address must be answered within a few seconds whatever one
// client holds.
func TestMetricsPortOneClientCannotHoldIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		hold func(t *testing.T, addr string, slow string)
	}{
		{"300 sockets that send nothing", func(t *testing.T, addr, _ string) {
			for range 300 {
				c, err := dialFrom(t, "127.0.0.2", addr)
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				t.Cleanup(func() { c.Close() })
			}
		}},
		{"64 kept-alive connections from 8 addresses", func(t *testing.T, addr, _ string) {
			for a := range 8 {
				for range 8 {
					keepAsking(t, fmt.Sprintf("127.0.0.%d", 10+a), addr, "/healthz")
				}
			}
		}},
		{"64 slow requests from one address", func(t *testing.T, addr, slow string) {
			for range 64 {
				keepAsking(t, "127.0.0.3", addr, slow)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := serveMetricsPort(t)
			tc.hold(t, addr, "/explain")
			time.Sleep(500 * time.Millisecond) // the holder's connections in
			scraper := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			for i := range 3 {
				start := time.Now()
				resp, err := scraper.Get("http://" + addr + "/metrics")
				if err != nil {
					t.Fatalf("scrape %d while one client holds the port: %v after %s", i, err, time.Since(start).Round(time.Millisecond))
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("scrape %d: %s", i, resp.Status)
				}
				time.Sleep(300 * time.Millisecond)
			}
		})
	}
}

// serveMetricsPort serves a metrics port on a free loopback port until the
// test ends; its /explain takes until the test ends (a long scan).
func serveMetricsPort(t *testing.T) string {
	t.Helper()
	release := make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, "{}\n")
	})
	srv, err := startMetricsServer("127.0.0.1:0", prometheus.NewRegistry(), func() error { return nil }, nil, nil, slow,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.serve(ctx) }()
	t.Cleanup(func() {
		close(release)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("metrics server: %v", err)
		}
	})
	return srv.Addr()
}

// dialFrom connects to addr from the loopback address from (any of
// 127.0.0.0/8 is this host's), so that a test's clients are told apart.
func dialFrom(t *testing.T, from, addr string) (net.Conn, error) {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	return d.Dial("tcp", addr)
}

// keepAsking keeps a connection from address from asking addr for path on
// it, one request after the other, until the test ends; a connection the
// server closes is opened again.
func keepAsking(t *testing.T, from, addr, path string) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conn net.Conn
	t.Cleanup(func() {
		close(stop)
		mu.Lock()
		if conn != nil {
			conn.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			c, err := dialFrom(t, from, addr)
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			mu.Lock()
			select {
			case <-stop:
				mu.Unlock()
				c.Close()
				return
			default:
			}
			conn = c
			mu.Unlock()
			br := bufio.NewReader(c)
			for {
				if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
					break
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					break
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				select {
				case <-stop:
					c.Close()
					return
				case <-time.After(500 * time.Millisecond):
				}
			}
			c.Close()
		}
	})
}
