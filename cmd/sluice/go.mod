module github.com/sluicehq/sluice/cmd/sluice

go 1.26.0

require (
	github.com/sluicehq/sluice v0.0.0-00010101000000-000000000000
	github.com/sluicehq/sluice/connector/rabbitmq v0.0.0-00010101000000-000000000000
)

require (
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/jonboulle/clockwork v0.5.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

// The modules of this repository come from the checkout, so that a change
// to one is seen by the others without a release (see docs/modules.md).
// A module that requires this one ignores these replacements.
replace (
	github.com/sluicehq/sluice => ../..
	github.com/sluicehq/sluice/connector/connectortest => ../../connector/connectortest
	github.com/sluicehq/sluice/connector/rabbitmq => ../../connector/rabbitmq
	github.com/sluicehq/sluice/observer/otel => ../../observer/otel
)
