package client

import (
	"context"
	"net/http"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// Services are the Connect clients of one server, for Invoke.
type Services struct {
	// Server is the server's base URL.
	Server    string
	Admission quoratev1connect.AdmissionServiceClient
	Admin     quoratev1connect.AdminServiceClient
	Lease     quoratev1connect.LeaseServiceClient
}

// Call describes the request Invoke sends.
type Call struct {
	// Procedure names the RPC in errors and RetryInfo, e.g. "Refund".
	Procedure string
	// Key routes the call to the leader of the key's group; empty sends it
	// to any node (which forwards it).
	Key string
	// RequestID is the request's ID, for OutcomeUnknownError: a request
	// that changes state must carry one, the same in every attempt.
	RequestID string
	// ReadOnly says the request changes nothing (Peek, CheckFence): an
	// attempt's outcome never matters, so the failure is never an
	// *OutcomeUnknownError.
	ReadOnly bool
}

// Invoke sends a request the caller built itself (any RPC of the API)
// through c's routing, deadline and retries, exactly as c's own methods
// send theirs: send makes one attempt against the Services of the server
// chosen for it and must send the same request every time (the same request
// ID: a retry of a request that was applied then gets the recorded answer).
// It is for programs that need the API's own messages, such as the quorate
// CLI, which prints them; it never applies on_unavailable.
//
// A failure is a *MismatchError (at once), an *OutcomeUnknownError when some
// attempt may have been applied and none was answered before ctx's deadline
// (Config.Timeout when ctx has none), else the last attempt's error (a
// Connect error, or what send returned).
func Invoke[Resp any](ctx context.Context, c *Client, rpc Call, send func(context.Context, Services) (*connect.Response[Resp], error)) (*Resp, error) {
	ctx, cancel, err := c.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	resp, err := call(ctx, c, callSpec{procedure: rpc.Procedure, key: rpc.Key, readOnly: rpc.ReadOnly, requestID: rpc.RequestID},
		func(ctx context.Context, server string) (*Resp, http.Header, error) {
			cn := c.conn(server)
			res, err := send(ctx, Services{Server: server, Admission: cn.admission, Admin: cn.admin, Lease: cn.lease})
			if err != nil {
				return nil, metaOf(err), err
			}
			return res.Msg, res.Header(), nil
		})
	if err != nil {
		return nil, publicError(err, rpc.RequestID)
	}
	return resp, nil
}
