// Package statuspage renders a Quorate cluster's status page: one
// self-contained HTML document (html/template, its template and stylesheet
// embedded with embed.FS, no script, font or image from anywhere) that a
// browser reloads every few seconds. It shows the members and their health,
// the groups with their leaders, replicas and slot ranges, the plans with
// their progress, the policies with their versions and decision rates, and
// the hot keys.
//
// The package only renders: a node gathers the Page (node/status_page.go)
// and serves it at /status. Its test drives a headless Chromium against a
// real 3-node cluster.
package statuspage
