module github.com/quorate/quorate/client

go 1.26.0

// The generated API is a module of its own in this repository: build
// against its copy here, not a published version.
replace github.com/quorate/quorate/proto => ../proto

require (
	connectrpc.com/connect v1.21.1
	github.com/cenkalti/backoff/v5 v5.0.3
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/prometheus/client_golang v1.24.1
	github.com/quorate/quorate/proto v0.0.0-00010101000000-000000000000
	golang.org/x/time v0.9.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260720211330-0afa2a65878a
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.70.1 // indirect
	github.com/prometheus/procfs v0.21.1 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
