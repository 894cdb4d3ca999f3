// Package docs owns the checks of Quorate's documentation: README.md,
// docs/*.md and every package's DESIGN.md. It holds no code a program
// imports; its tests read the Markdown files from the repository.
//
// # What it checks
//
//   - Every relative link (and image) resolves: the file or directory it
//     names exists, and an #anchor names a heading of the Markdown file it
//     points into (its slug as GitHub makes it, with -1, -2, ... for
//     repeated headings) or an explicit id; a link into a file that is not
//     Markdown may only name a line (#L12 or #L12-L20). Links inside code
//     are not links; links with a scheme (https:, mailto:) are not checked.
//   - Every topic document of docs/ (all but DESIGN.md) opens with a table
//     of contents: before its first second-level heading, a link to each of
//     its second-level headings (but those of a generated section, between
//     <!-- BEGIN and <!-- END markers, whose heading changes when it is
//     generated again).
//   - README.md stays at most 300 lines.
package docs
