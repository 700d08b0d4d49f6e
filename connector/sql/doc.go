// Package sql reads from and writes to SQL databases through
// [database/sql], so that any driver works: [Query] reads a table or query
// in pages ordered by a unique key and resumes after the last settled row,
// [Upsert] writes batches with the database's upsert and isolates a bad
// row, and [Outbox] reads an outbox table and removes each row once its
// item settled. The program opens the *sql.DB with the driver of its
// choice and names the database's [Dialect].
//
// The package's name is that of database/sql's; a program that uses both
// imports this one under another name:
//
//	import sluicesql "github.com/sluicehq/sluice/connector/sql"
package sql
