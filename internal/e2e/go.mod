module github.com/sluicehq/sluice/internal/e2e

go 1.26.0

require (
	github.com/sluicehq/sluice v0.0.0-00010101000000-000000000000
	github.com/sluicehq/sluice/connector/rabbitmq v0.0.0-00010101000000-000000000000
	github.com/sluicehq/sluice/idempotency/sqlstore v0.0.0-00010101000000-000000000000
)

require (
	github.com/chromedp/chromedp v0.23.1
	github.com/jackc/pgx/v5 v5.12.0
	github.com/jonboulle/clockwork v0.5.0
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/sluicehq/sluice/connector/connectortest v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/Shopify/toxiproxy/v2 v2.12.0 // indirect
	github.com/chromedp/cdproto v0.160.1 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/rs/zerolog v1.33.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)

// The modules of this repository come from the checkout, so that a change
// to one is seen by the others without a release (see docs/modules.md).
// A module that requires this one ignores these replacements.
replace (
	github.com/sluicehq/sluice => ../..
	github.com/sluicehq/sluice/connector/connectortest => ../../connector/connectortest
	github.com/sluicehq/sluice/connector/rabbitmq => ../../connector/rabbitmq
	github.com/sluicehq/sluice/idempotency/sqlstore => ../../idempotency/sqlstore
	github.com/sluicehq/sluice/observer/otel => ../../observer/otel
)
