// Package e2e holds Sluice's end-to-end tests across processes: consumer
// processes on one RabbitMQ queue, writing through an idempotent sink to
// PostgreSQL, while the test cuts their connections and kills one. It has
// no code of its own; see its tests.
package e2e
