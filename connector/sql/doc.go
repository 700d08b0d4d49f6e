// Package sql reads from and writes to SQL databases through
// [database/sql], so that any driver works: [Query] reads a table or query
// in pages ordered by a unique key and resumes after the last settled row,
// [Upsert] writes batches with the database's upsert and isolates a bad
// row, and [Outbox] reads an outbox table and removes each row once its
// item settled. The program opens the *sql.DB with the driver of its
// choice and names the database's [Dialect]; the package imports no
// driver.
//
// The package's name is that of database/sql's; a program that uses both
// imports this one under another name:
//
//	import sluicesql "github.com/sluicehq/sluice/connector/sql"
//
// # Reading a table
//
// [Query] reads in pages by keyset: each page is
//
//	SELECT ... FROM t WHERE (k1, k2) > (?, ?) ORDER BY k1, k2 LIMIT n
//
// after the key of the last row read, never with OFFSET, which would make
// the database read and drop every row before the page, and would shift
// the pages when a row before them is inserted or deleted. (MySQL and MariaDB get the condition written out as k1
// >= ? AND (k1 > ? OR k2 > ?): MariaDB 10.11 scans the whole index for
// the row-value form, and reads a range of it for this one.) The key must
// be unique and NOT NULL, and an index should serve its order. The source
// fails the run with a [*KeyError] rather than lose a row or read one for
// ever: at the first Open of each run, and when it follows the table at
// each poll, it counts the rows (of Where) with NULL in a key or
// watermark column, one query, which reads the whole table when the
// column has no index; two rows of one page with the same
// key say that it is not unique; and a page that starts with the row it
// was to start after says that the database compares the key otherwise
// than the driver gave it. Before a page's rows are emitted, a key or
// watermark column that the pages cannot order by fails the run too: on
// MySQL an ENUM or SET (ordered by its list, compared as text) and a
// column read into a float field narrower than it (rounded). Rows that tie with the last row of a page,
// outside it, are not seen: a non-unique key loses them.
//
// Each row is emitted with its key as its position (node.Emitter's
// EmitAt): the bytes are the package's own encoding of the key's values
// (integers, floats, strings, []byte, times, booleans), opaque to the
// caller, and they carry a fingerprint of the query (its table or From,
// key and watermark columns), so that Resume refuses another query's
// position. With pipeline.WithCheckpoint, a run that failed, was stopped or
// was killed resumes after the last row whose item settled; the rows
// after it are read again, so the sink should be idempotent (an upsert).
//
// A page is read whole before its rows are emitted: the source holds no
// connection, and no read transaction, while the pipeline applies
// backpressure, and its memory is one page of items however large the
// table. A page that fails fails the source's Run; a node restart or
// retry of the source runs it again from the row after the last one it
// emitted.
//
// # Following a table
//
// With QueryOptions.Follow, the source does not end after the last row:
// every Follow, on QueryOptions.Clock or else the pipeline's clock (the
// source is a pipeline.ClockSetter), it reads the rows past the last key,
// until the run drains (pipeline.Pipeline.Drain, which ends it cleanly) or
// its context ends. This is change capture without a replication slot,
// and it sees what such a poll can see:
//
//   - By key, it sees inserted rows whose key is past the last one read:
//     an increasing key (an identity column, a time-ordered ID). It never
//     sees an update, nor a row inserted with a smaller key.
//   - With QueryOptions.Watermark (a column such as updated_at that every
//     write sets), rows are read in the order of (watermark, key), so an
//     updated row is read again, once its new watermark is past the last
//     one read; a row updated twice between two polls is read once, as it
//     stands.
//   - Neither sees a deleted row: mark rows deleted instead (a deleted_at
//     column that the watermark follows).
//   - A transaction that commits after a poll, with a key or a watermark
//     older than a row that poll read (its value was taken when it began,
//     say), is never read: the poll has moved past it. Have the database
//     set the watermark at commit, or read with a Where that leaves out
//     the last seconds (updated_at < now() - interval '5 seconds'), longer
//     than your transactions last.
//   - Times compare as the database stores them: keep a time watermark in
//     UTC. SQLite stores a time as text (or a number) and its driver parses
//     it, so the source keeps a time key as SQLite stored it and compares
//     the column with that: the driver's own text (with a time.Now()'s
//     "m=+0.001" suffix), CURRENT_TIMESTAMP's and integers all work, as
//     long as one column holds one format, which sorts as text in time
//     order.
//
// # Writing
//
// [Upsert] ends a stream with a sink that writes its items in batches,
// one transaction per batch, with the dialect's upsert (ON CONFLICT ... DO
// UPDATE on SQLite and PostgreSQL, ON DUPLICATE KEY UPDATE on MySQL), so
// that an item written twice leaves one row. A batch that the database
// refuses for one row is split until that row is alone: every other row
// is written, and the row fails alone with a [*RowError] naming the
// constraint and the database's code. [Classifier] tells a dialect's
// transient errors (deadlocks, serialization failures, lock timeouts)
// from permanent ones (constraint violations, bad data). A COMMIT that
// fails leaves its rows' fate unknown: they are written again, never
// dead-lettered for it ([ErrCommitUnknown]).
//
// # Outbox
//
// An outbox source reads a table that a service fills in the same
// transactions as its own changes, in key order, and deletes (or marks)
// each row once its item settled, so that what the service committed is
// published at least once.
//
// # Columns
//
// Query, Upsert and the outbox read a struct by the same rules: a field
// takes the column its db tag names, or, without a tag, the column named
// as the field in lower case; db:"-" and unexported fields take none; the
// fields of an embedded struct held by value and without a tag are the
// item's own, and an embedded pointer without a tag takes no column. When
// two fields name one column, the shallower one takes it. The tag option
// key (db:"id,key") names Upsert's conflict key.
package sql
