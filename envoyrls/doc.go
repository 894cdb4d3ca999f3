// Package envoyrls serves Envoy's rate-limit service API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, the
// message types of github.com/envoyproxy/go-control-plane) on top of
// Quorate's admission: Envoy's global rate-limit filter calls it over gRPC,
// and each call becomes one Admit.
//
// # Configuration
//
// The limits come from YAML files in the rate-limit service's own format
// (Parse): each document names a domain and a tree of descriptors, each with
// a key, an optional value (a value ending in '*' matches by prefix), an
// optional rate_limit {unit, requests_per_unit, unit_multiplier, name,
// unlimited}, shadow_mode, detailed_metric (accepted, without effect) and
// nested descriptors. A request's descriptor is looked up entry by entry
// (an exact key and value first, then a prefix, then the key alone), and
// the limit applies only when its last entry lands on a node with a
// rate_limit, as in Envoy's reference service. Fields this package does
// not implement (replaces, quota_mode, value_to_metric, a request's limit
// override, negative hits) are refused, naming the field.
//
// # Mapping onto Quorate
//
// Each descriptor node with a counted rate_limit becomes a Quorate policy
// (Config.Policies), named from the domain and the path of keys and values
// leading to it, readable: "envoy.edge.remote_address",
// "envoy.web.path.api_login.user" (policyName). Only a name longer than a
// policy name may be (64 bytes), or one that two descriptors of the
// configuration read the same (each of them), ends in a hash (SHA-256) of
// the domain and path. A rate_limit without a name of its own is answered
// and headed under its policy's name, which the policy list and the
// metrics show too. The name stays when the limit changes, so reapplying a
// changed file bumps the policy's version. second, minute, hour and day (times unit_multiplier) become
// fixed_window policies, whose windows are aligned to the Unix epoch as the
// reference service's are; week, month and year become quota policies over
// the UTC calendar. shadow_mode sets the policy's shadow flag: counted,
// never denied. A limit of requests_per_unit 0 denies without counting;
// an unlimited one admits without counting; a descriptor with no limit is
// allowed.
//
// Each counted descriptor's key is "{envoy:<domain>}" followed by the
// request's entries, escaped, so that the same descriptor values always
// count on the same key. The hash tag is the domain: every counted
// descriptor of one request goes into one Admit (the first as the request,
// the rest as its also checks), decided atomically — either all are
// charged or, when one is over its limit, none is. The consequence is that
// all of a domain's counters live in one shard and are decided by one
// group's leader; spread heavy traffic over several domains. (A tag taken
// from the request, such as its first entry, would split a descriptor's
// counter by whatever else the request carried, and its limit would no
// longer mean what the file says.) A request has at most
// admission.MaxChecks (9) counted descriptors, the checks one Admit
// decides; more are refused, naming descriptors.
//
// The cost of each descriptor is its own hits_addend when set, else the
// request's hits_addend, at least 1. A cost above requests_per_unit can
// never be admitted: it is answered OVER_LIMIT (OK in shadow mode) without
// counting, and nothing of the request is charged.
//
// # Exactly once (opt-in)
//
// With Options.DedupeRequestID, when the call carries an x-request-id
// header (Envoy's request ID), the Admit's request_id is a hash of it with
// the domain, descriptors and hits_addend: a retried call gets the first
// answer and spends nothing, while two calls of one HTTP request with
// different descriptors (two filter stages) remain two decisions. It is
// off by default because the header is only as trustworthy as its
// source: Envoy passes a client's own x-request-id on when it trusts the
// client's headers (preserve_external_request_id, or a request from an
// internal address), and a client that pins the ID would have every call
// after its first answered as a retry, uncounted. Without it each call is
// one decision, and a call Envoy retries after a lost answer spends twice.
//
// # Response
//
// overall_code is OVER_LIMIT when the Admit was denied; each descriptor's
// status carries current_limit, limit_remaining and duration_until_reset,
// all of the policy version the decision used: a call decided right after
// the files changed, by a group that has not yet copied the new policy
// table, reports the limit (and, for a fixed unit, the window) it was
// decided under, never the file's new limit beside the old remaining.
// With Options.Headers, response_headers_to_add carries the RateLimit-Policy
// and RateLimit header fields (package ratelimitheader, as the middleware's)
// of the counted descriptor with the fewest units remaining, on every answer, as
// the reference service's response-headers option does.
package envoyrls
