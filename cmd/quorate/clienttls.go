package main

import (
	"net/http"

	"github.com/quorate/quorate/cmd/internal/apiflags"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// httpClientOf returns the HTTP client of t's files, sending the call's
// bearer token (apiflags.WithToken): apiHTTPClient when none is given, else
// one that verifies the server's certificate and host name (an IP address
// too) against --tls-ca and presents --tls-cert.
func httpClientOf(t apiflags.TLS) (*http.Client, error) {
	if !t.Given() {
		return apiHTTPClient, nil
	}
	tr, err := t.Transport(0)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: apiflags.WithToken(tr)}, nil
}

// http is the HTTP client begin or beginServers built for the command.
func (o *clientOptions) http() *http.Client {
	if o.hc == nil {
		return apiHTTPClient
	}
	return o.hc
}

// adminClient is the command's client of the AdminService of the node at
// baseURL: Connect over HTTP/1.1 (or HTTP/2 with TLS), which every node
// serves.
func (o *clientOptions) adminClient(baseURL string) quoratev1connect.AdminServiceClient {
	return newAdminClient(o.http(), baseURL)
}
