package middleware

import (
	"net/http"
)

// Handler returns next behind the limiter: each request is admitted before
// next runs, and answered 429, 400, 422 or 503 instead when it is not.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := l.decide(r)
		h := w.Header()
		for k, vs := range v.header {
			h[k] = vs
		}
		switch v.kind {
		case pass:
			if v.refundID == "" {
				next.ServeHTTP(w, r)
				return
			}
			sw := &statusWriter{ResponseWriter: w}
			next.ServeHTTP(sw, r)
			l.refund(r, v, sw.status >= 500)
		case badKey:
			http.Error(w, v.msg, http.StatusBadRequest)
		case reused:
			http.Error(w, v.msg, http.StatusUnprocessableEntity)
		case denied:
			http.Error(w, v.msg, http.StatusTooManyRequests)
		default:
			http.Error(w, v.msg, http.StatusServiceUnavailable)
		}
	})
}

// HTTP returns a middleware admitting every request through a; it panics on
// options New rejects (use New to get the error instead).
func HTTP(a Admitter, opts ...Option) func(http.Handler) http.Handler {
	l, err := New(a, opts...)
	if err != nil {
		panic(err)
	}
	return l.Handler
}
