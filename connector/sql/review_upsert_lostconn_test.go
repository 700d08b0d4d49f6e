package sql_test

import (
	"database/sql"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/internal/servicetest"
)

// reviewProxy forwards TCP connections to target until cut.
type reviewProxy struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newReviewProxy(t *testing.T, target string) *reviewProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &reviewProxy{ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Go(func() { io.Copy(s, c); s.Close() })
			p.wg.Go(func() { io.Copy(c, s); c.Close() })
		}
	})
	t.Cleanup(func() { p.cut(); p.wg.Wait() })
	return p
}

// cut drops every connection and takes no more.
func (p *reviewProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// Review finding 8: a connection lost while a statement runs is, with
// go-sql-driver/mysql, mysql.ErrInvalidConn ("invalid connection", a
// plain errors.New), never the 2006/2013 of libmysqlclient that
// Classifier lists for MySQL. Classifier(MySQL) calls it permanent, so
// Write takes the lost connection for a bad row: a batch is split, and a
// row alone gets a permanent RowError, dead-lettered at its first attempt
// although the docs say a lost connection is transient and not split.
func TestReviewUpsertLostConnectionIsTransient(t *testing.T) {
	dsn := servicetest.MariaDB(t)
	direct := openMariaDB(t)
	table := productTable(t, direct, sluicesql.MySQL)
	_, err := direct.Exec("INSERT INTO "+table+" (id, name, qty) VALUES (?, ?, ?)", 1, "seed", 1)
	require.NoError(t, err)

	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	proxy := newReviewProxy(t, cfg.Addr)
	cfg.Addr = proxy.ln.Addr().String()
	cfg.ParseTime = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)

	// Another transaction holds row 1, so that the upsert's statement is
	// in flight when the connection drops.
	other, err := direct.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer other.Rollback()
	_, err = other.ExecContext(t.Context(), "UPDATE "+table+" SET qty = 7 WHERE id = 1")
	require.NoError(t, err)

	u, err := sluicesql.NewUpserter[product](db, sluicesql.MySQL, sluicesql.UpsertOptions{Table: table})
	require.NoError(t, err)
	done := make(chan []error, 1)
	go func() { done <- u.Write(t.Context(), products(1)) }()
	waitForLockWait(t, t.Context(), direct, sluicesql.MySQL, table)
	proxy.cut()
	errs := <-done
	require.Len(t, errs, 1)
	t.Logf("the row's error: %v", errs[0])
	assert.ErrorIs(t, errs[0], mysql.ErrInvalidConn)
	assert.True(t, sluicesql.Classifier(sluicesql.MySQL).IsTransient(errs[0]), "a lost connection is transient")
	assert.True(t, sluicesql.Classifier(sluicesql.MySQL).IsTransient(mysql.ErrInvalidConn), "a lost connection is transient")
}
