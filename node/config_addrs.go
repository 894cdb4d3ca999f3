package node

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// The addresses a Config names: loopback or not, advertisable, and the
// join URL built from --join.

// isLoopback reports whether addr's host is a loopback IP or "localhost".
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkAdvertisable reports whether addr is a host:port peers can dial.
func checkAdvertisable(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %v", addr, err)
	}
	if port == "0" || port == "" {
		return fmt.Errorf("%q has no port", addr)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%q is not an address peers can dial; set the advertise flag", addr)
	}
	return nil
}

// joinURL turns "host:port", "http://host:port" or "https://host:port"
// into the API base URL; host:port gets the scheme of this node's API.
func (c Config) joinURL() (string, error) { return joinURLWith(c.Join, c.apiScheme()) }

// joinURL turns "host:port" or "http://host:port" into the API base URL.
func joinURL(s string) (string, error) { return joinURLWith(s, "http") }

// joinURLWith turns "host:port" (given scheme) or "http(s)://host:port"
// into the API base URL.
func joinURLWith(s, scheme string) (string, error) {
	if !strings.Contains(s, "://") {
		s = scheme + "://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%q: scheme must be http or https", s)
	}
	if u.Host == "" {
		return "", fmt.Errorf("%q has no host", s)
	}
	return u.Scheme + "://" + u.Host, nil
}
