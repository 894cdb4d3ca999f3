// Package filewatch is Quorate's one way of reloading files that change on
// disk: the token and access files (package access) and the TLS
// certificate, key and CA bundle (package certs) use it.
//
// # What it owns
//
// A Watcher holds a value of a type T parsed from a fixed list of files
// (one or more) by a function its user gives, and looks at the files again
// on use: Current and Status check them when a check is due (at most once
// per Options.Interval, by whichever caller comes first; the others go on
// with the value in use), and Check and Reload check them at once. It
// starts no goroutine.
//
// A check stats each file. When every file is the same file (identity),
// with the same size and modification time, as when it was last read, and
// that read came at least a racy window (two seconds) after the
// modification time, the files are taken as unchanged and not read: a write
// within the file system's timestamp granularity of an earlier read could
// keep size and time, so such a read is repeated at the next check.
// Otherwise every file is read and its SHA-256 taken; content equal to what
// is in use is never parsed again. New content is parsed whole and the
// value swapped in atomically: a reader sees the old value or the new,
// never a mix of files.
//
// A check that fails (a file missing or unreadable, content that does not
// parse) keeps the previous good value in use and reports the error, with
// its time, in Status. While it fails, every check reads and parses the
// files again, whatever their stat says, until they are good (content that
// depends on the time, such as a certificate not yet valid, may become
// good unchanged); files back to the content in use clear the error.
// Options.OnChange hears of each new value, of each failure whose error is
// news, and of a failure that clears, outside the Watcher's locks.
//
// # Must not
//
// Start goroutines, know what the files mean, or read the clock except to
// pace checks, stamp Status and judge the racy window.
package filewatch
