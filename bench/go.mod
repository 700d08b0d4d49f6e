module github.com/sluicehq/sluice/bench

go 1.26.1

require (
	github.com/sluicehq/sluice v0.0.0-00010101000000-000000000000
	github.com/sluicehq/sluice/connector/connectortest v0.0.0-00010101000000-000000000000
	github.com/sluicehq/sluice/connector/kafka v0.0.0-00010101000000-000000000000
	github.com/sluicehq/sluice/connector/nats v0.0.0-00010101000000-000000000000
	github.com/sluicehq/sluice/connector/rabbitmq v0.0.0-00010101000000-000000000000
	github.com/sluicehq/sluice/connector/sql v0.0.0-00010101000000-000000000000
	github.com/sluicehq/sluice/observer/otel v0.0.0-00010101000000-000000000000
	github.com/sluicehq/sluice/observer/prometheus v0.0.0-00010101000000-000000000000
)

require (
	github.com/nats-io/nats.go v1.55.0
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/stretchr/testify v1.12.1
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kadm v1.20.0
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	github.com/twmb/franz-go/pkg/kmsg v1.15.1
	go.opentelemetry.io/otel/sdk/metric v1.47.0
	go.uber.org/goleak v1.3.0
	modernc.org/sqlite v1.62.0
)

require (
	github.com/Shopify/toxiproxy/v2 v2.12.0 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jonboulle/clockwork v0.5.0 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	github.com/rs/zerolog v1.33.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/sdk v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	modernc.org/libc v1.80.1 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
)

// The modules of this repository come from the checkout, so that a change
// to one is seen by the others without a release (see docs/modules.md).
// A module that requires this one ignores these replacements.
replace (
	github.com/sluicehq/sluice => ..
	github.com/sluicehq/sluice/connector/connectortest => ../connector/connectortest
	github.com/sluicehq/sluice/connector/kafka => ../connector/kafka
	github.com/sluicehq/sluice/connector/nats => ../connector/nats
	github.com/sluicehq/sluice/connector/rabbitmq => ../connector/rabbitmq
	github.com/sluicehq/sluice/connector/sql => ../connector/sql
	github.com/sluicehq/sluice/observer/otel => ../observer/otel
	github.com/sluicehq/sluice/observer/prometheus => ../observer/prometheus
)
