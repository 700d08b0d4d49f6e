module github.com/sluicehq/sluice/idempotency/redisstore

go 1.26.0

require github.com/sluicehq/sluice v0.0.0-00010101000000-000000000000

require (
	github.com/jonboulle/clockwork v0.5.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

// The modules of this repository come from the checkout, so that a change
// to one is seen by the others without a release (see docs/modules.md).
// A module that requires this one ignores these replacements.
replace github.com/sluicehq/sluice => ../..
