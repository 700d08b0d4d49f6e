module github.com/sluicehq/sluice

go 1.26.0

require (
	github.com/jonboulle/clockwork v0.5.0
	go.uber.org/goleak v1.3.0
	golang.org/x/sync v0.25.0
)
