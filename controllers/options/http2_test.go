package options_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"chamber.dev/chamber/controllers/options"
)

// TestMetricsServerHTTP2: the HTTPS metrics endpoint offers HTTP/1.1 only, unless
// --enable-http2 asks for HTTP/2, which a client offering both then gets.
func TestMetricsServerHTTP2(t *testing.T) {
	for enable, want := range map[bool]string{false: "http/1.1", true: "h2"} {
		o := options.New()
		o.MetricsSecure, o.MetricsAddr, o.MetricsHTTP2 = true, "127.0.0.1:0", enable
		srv, err := metricsserver.NewServer(o.MetricsServer(), &rest.Config{Host: "https://127.0.0.1:1"}, http.DefaultClient)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Start(ctx) }()

		// controller-runtime's server tells the port it listens on once it does.
		bound := srv.(interface{ GetBindAddr() string })
		var got string
		deadline := time.Now().Add(10 * time.Second)
		for {
			conn, err := tls.Dial("tcp", bound.GetBindAddr(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}})
			if err == nil {
				got = conn.ConnectionState().NegotiatedProtocol
				_ = conn.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("--enable-http2=%t: the metrics endpoint never answered: %v", enable, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("--enable-http2=%t: metrics server: %v", enable, err)
		}
		if got != want {
			t.Errorf("--enable-http2=%t: negotiated %q, want %q", enable, got, want)
		}
	}
}
