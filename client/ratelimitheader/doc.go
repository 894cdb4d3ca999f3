// Package ratelimitheader formats the RateLimit-Policy and RateLimit HTTP
// header fields (IETF httpapi RateLimit header fields, structured-field
// lists, RFC 9651) of Quorate's decisions. The HTTP and Connect middleware
// (package middleware) and Envoy's rate-limit service (package envoyrls)
// both answer with them.
//
// # Must not
//
// Know how a decision was made: it formats the numbers it is given.
package ratelimitheader
