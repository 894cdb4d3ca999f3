package peermux

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Peer authentication under the cluster's peer secret (Options.Secret).
// The cluster ID in a header is an identifier, not a credential: it
// crosses the wire in clear and admins see it. A mux with a secret admits
// only a dialer that proves it holds the same secret, and proves it holds
// it too, before any byte of the channel's is read or written; the secret
// itself never crosses the wire:
//
//	dialer → listener: header (0xA9, channel, cluster ID, nonce_d)
//	listener → dialer: nonce_l, MAC(listener)
//	dialer → listener: MAC(dialer)
//
// where MAC(role) = HMAC-SHA256(secret, authLabel ‖ role ‖ cluster ID ‖
// channel ‖ nonce_d ‖ nonce_l), each nonce 32 fresh random bytes. A
// recorded exchange replays nothing (the other end's nonce is new), a MAC
// of one role is not one of the other (a listener's answer cannot be
// reflected as a dialer's proof), and one for a channel or cluster opens no
// other. The listener answers only a header its cluster gate admits, and
// the whole exchange, with the header, must end within the handshake
// timeout. A listener closes a connection that fails it — a header without
// the exchange, a wrong or missing proof, a truncated or late one — counts
// it in Stats.AuthRefused and logs a warning at most once a minute; a
// dialer whose peer's proof is wrong fails the dial with ErrPeerAuth.
//
// Over TLS the exchange runs inside the TLS session, as a second factor.

const (
	// MinSecretLen is the shortest peer secret, in bytes.
	MinSecretLen = 32

	authNonceLen = 32
	authMACLen   = sha256.Size
	authLabel    = "quorate peer auth v1\x00"
)

// ErrPeerAuth is returned by Dial when the peer does not prove it holds
// the cluster's peer secret.
var ErrPeerAuth = errors.New("peermux: peer authentication failed")

// The roles a MAC is made for.
const (
	roleDialer   = "dialer\x00"
	roleListener = "listener\x00"
)

// authMAC is the proof of role over the exchange that opened with h (its
// cluster ID, channel and the dialer's nonce) and the listener's nonce.
func authMAC(secret []byte, role string, h *peerHeader, nonceL []byte) []byte {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(authLabel))
	mac.Write([]byte(role))
	mac.Write(h.rawID[:])
	mac.Write(binary.BigEndian.AppendUint64(nil, h.ch))
	mac.Write(h.nonce[:])
	mac.Write(nonceL)
	return mac.Sum(nil)
}

// newNonce returns authNonceLen fresh random bytes.
func newNonce() []byte {
	b := make([]byte, authNonceLen)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return b
}

// authModeAdmits reports whether h's kind of header is the one this mux
// takes — the exchange exactly when it has a secret — and logs a refusal.
func (m *Mux) authModeAdmits(c net.Conn, h *peerHeader) bool {
	switch {
	case m.secret != nil && !h.auth:
		m.refuseAuth(c, h.ch, errors.New("the dialer sent no proof of the peer secret (a node without --peer-secret-file, or not a node)"))
		return false
	case m.secret == nil && h.auth:
		m.refuseAuth(c, h.ch, errors.New("the dialer authenticates with a peer secret and this node has none: give every node the same --peer-secret-file"))
		return false
	}
	return true
}

// authenticateDialer runs the listener's side of the exchange on c, whose
// header h has been read, by deadline.
func (m *Mux) authenticateDialer(c net.Conn, h *peerHeader, deadline time.Time) error {
	if err := c.SetDeadline(deadline); err != nil {
		return err
	}
	nonceL := newNonce()
	if _, err := c.Write(append(nonceL, authMAC(m.secret, roleListener, h, nonceL)...)); err != nil {
		return fmt.Errorf("writing the challenge: %w", err)
	}
	proof := make([]byte, authMACLen)
	if _, err := io.ReadFull(c, proof); err != nil {
		return fmt.Errorf("reading the dialer's proof: %w", err)
	}
	if !hmac.Equal(proof, authMAC(m.secret, roleDialer, h, nonceL)) {
		return errors.New("the dialer's proof is wrong: it holds another peer secret")
	}
	return c.SetWriteDeadline(time.Time{}) // the read deadline stays: the first byte is due by it
}

// authenticateListener runs the dialer's side of the exchange on c, just
// after it wrote h, by deadline.
func (m *Mux) authenticateListener(c net.Conn, h *peerHeader, deadline time.Time) error {
	if err := c.SetDeadline(deadline); err != nil {
		return err
	}
	answer := make([]byte, authNonceLen+authMACLen)
	if _, err := io.ReadFull(c, answer); err != nil {
		return fmt.Errorf("%w: reading the peer's proof: %w", ErrPeerAuth, err)
	}
	nonceL, proof := answer[:authNonceLen], answer[authNonceLen:]
	if !hmac.Equal(proof, authMAC(m.secret, roleListener, h, nonceL)) {
		return fmt.Errorf("%w: the peer's proof is wrong: it holds another peer secret", ErrPeerAuth)
	}
	if _, err := c.Write(authMAC(m.secret, roleDialer, h, nonceL)); err != nil {
		return fmt.Errorf("writing the proof of the peer secret: %w", err)
	}
	return c.SetDeadline(time.Time{})
}

// refuseAuth counts and logs a connection refused for its authentication.
func (m *Mux) refuseAuth(c net.Conn, ch uint64, err error) {
	m.stats.authRefused.Add(1)
	if m.warnAtMostOnceAMinute(&m.authLogAt) {
		m.log.Warn("refused a peer connection: it did not prove the cluster's peer secret (further ones logged at debug level for a minute)",
			"remote", c.RemoteAddr(), "channel", ch, "err", err, "refused_so_far", m.stats.authRefused.Load())
		return
	}
	m.log.Debug("refused a peer connection: it did not prove the cluster's peer secret", "remote", c.RemoteAddr(), "channel", ch, "err", err)
}

// warnAtMostOnceAMinute reports whether a minute has passed since *at, and
// then sets it to now.
func (m *Mux) warnAtMostOnceAMinute(at *time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if now.Sub(*at) < time.Minute {
		return false
	}
	*at = now
	return true
}
