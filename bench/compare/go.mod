module github.com/sluicehq/sluice/bench/compare

go 1.26.1

require (
	github.com/ThreeDotsLabs/watermill v1.5.1
	github.com/failsafe-go/failsafe-go v0.9.8
	github.com/sluicehq/sluice v0.0.0-00010101000000-000000000000
	github.com/sourcegraph/conc v0.3.0
	github.com/zenbaku/go-kitsune v0.2.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/bits-and-blooms/bitset v1.24.4 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jonboulle/clockwork v0.5.0 // indirect
	github.com/lithammer/shortuuid/v3 v3.0.7 // indirect
	github.com/oklog/ulid v1.3.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/zenbaku/go-kitsune/hooks v0.2.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/multierr v1.9.0 // indirect
	golang.org/x/net v0.59.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/time v0.16.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/sluicehq/sluice => ../..
