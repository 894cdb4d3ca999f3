package node

import "github.com/quorate/quorate/node/internal/engine"

// Observer is told of the commands a node proposes as a group's leader
// (Config.Observer): a program embedding a node can trace a command's life
// from it, and the fault tests stop or isolate a node at a precise moment
// of it. Its methods (Proposed, Applied) run on the request path, on the
// goroutine that proposes the entry: the request waits while they run.
type Observer = engine.Observer
