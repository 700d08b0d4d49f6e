package servicetest

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os/user"
	"strings"
	"time"
)

// The probes below speak just enough of each protocol to tell the service
// from something else on the port, with the standard library only: a
// client library here would be listed in the go.mod of every module whose
// tests use this package, and so in its users' module graphs. Each probe
// runs under one deadline of probeTimeout, so a port that accepts and
// never answers fails as fast as one that refuses.

// maxAnswer bounds what a probe reads of one answer; the services' first
// answers are a few hundred bytes.
const maxAnswer = 64 << 10

// A session is one probe's connection, with the deadline set and the
// reads buffered.
type session struct {
	conn net.Conn
	r    *bufio.Reader
}

// dial connects to addr (host:port) with the deadline of the whole probe.
func dial(addr string) (*session, error) {
	deadline := time.Now().Add(probeTimeout)
	conn, err := net.DialTimeout("tcp", addr, probeTimeout)
	if err != nil {
		return nil, err
	}
	if err := conn.SetDeadline(deadline); err != nil {
		conn.Close()
		return nil, err
	}
	return &session{conn: conn, r: bufio.NewReaderSize(conn, maxAnswer)}, nil
}

// startTLS wraps the connection in TLS, verifying the server's certificate
// for host unless insecure (PostgreSQL's sslmode=require does not verify).
func (s *session) startTLS(host string, insecure bool) error {
	c := tls.Client(s.conn, &tls.Config{ServerName: host, InsecureSkipVerify: insecure})
	if err := c.Handshake(); err != nil {
		return fmt.Errorf("TLS handshake: %w", err)
	}
	s.conn, s.r = c, bufio.NewReaderSize(c, maxAnswer)
	return nil
}

func (s *session) close() { s.conn.Close() }

func (s *session) write(b []byte) error {
	_, err := s.conn.Write(b)
	return s.explain(err)
}

func (s *session) readFull(b []byte) error {
	_, err := io.ReadFull(s.r, b)
	return s.explain(err)
}

// readLine reads one line, without its "\r\n".
func (s *session) readLine() (string, error) {
	line, err := s.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return "", fmt.Errorf("no line end in the first %d bytes of the answer", maxAnswer)
	}
	if err != nil {
		return "", s.explain(err)
	}
	return strings.TrimRight(string(line), "\r\n"), nil
}

// explain turns the errors of a read or write into what they mean for a
// probe.
func (s *session) explain(err error) error {
	var ne net.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("the server closed the connection")
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("no answer within %v", probeTimeout)
	}
	return err
}

// quote shows the start of an unexpected answer.
func quote(b []byte) string {
	if len(b) > 40 {
		return fmt.Sprintf("%q...", b[:40])
	}
	return fmt.Sprintf("%q", b)
}

// hostPort returns u's host:port, with def as the port when u has none.
func hostPort(u *url.URL, def string) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), def)
}

// probeRedis sends PING and expects +PONG. The address has no password; a
// server that wants one answers -NOAUTH, which fails the probe.
func probeRedis(addr string) error {
	s, err := dial(addr)
	if err != nil {
		return err
	}
	defer s.close()
	if err := s.write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := s.readLine()
	switch {
	case err != nil:
		return err
	case line == "+PONG":
		return nil
	case strings.HasPrefix(line, "-"):
		return fmt.Errorf("PING answered with an error: %s", line[1:])
	}
	return fmt.Errorf("not a Redis server: PING answered %s", quote([]byte(line)))
}

// probeNATS reads the server's INFO line, requires "jetstream":true in it,
// then sends CONNECT with the URL's credentials and a PING, and expects
// PONG (a refused login answers -ERR).
func probeNATS(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	s, err := dial(hostPort(u, "4222"))
	if err != nil {
		return err
	}
	defer s.close()
	line, err := s.readLine()
	if err != nil {
		return err
	}
	rest, ok := strings.CutPrefix(line, "INFO ")
	if !ok {
		return fmt.Errorf("not a NATS server: it greeted with %s", quote([]byte(line)))
	}
	var info struct {
		JetStream   bool `json:"jetstream"`
		TLSRequired bool `json:"tls_required"`
	}
	if err := json.Unmarshal([]byte(rest), &info); err != nil {
		return fmt.Errorf("not a NATS server: its INFO is not JSON: %w", err)
	}
	if !info.JetStream {
		return errors.New("the server does not have JetStream enabled")
	}
	if info.TLSRequired || u.Scheme == "tls" {
		if err := s.startTLS(u.Hostname(), false); err != nil {
			return err
		}
	}
	opts := map[string]any{"verbose": false, "pedantic": false, "name": "sluice servicetest"}
	if pass, ok := u.User.Password(); ok {
		opts["user"], opts["pass"] = u.User.Username(), pass
	} else if u.User != nil {
		opts["auth_token"] = u.User.Username()
	}
	connect, err := json.Marshal(opts)
	if err != nil {
		return err
	}
	if err := s.write([]byte("CONNECT " + string(connect) + "\r\nPING\r\n")); err != nil {
		return err
	}
	for {
		line, err := s.readLine()
		switch {
		case err != nil:
			return err
		case line == "PONG":
			return nil
		case strings.HasPrefix(line, "-ERR"):
			return fmt.Errorf("the server refused the connection: %s", strings.TrimSpace(line[4:]))
		case strings.HasPrefix(line, "INFO "), line == "PING", line == "+OK":
			continue // an update of the server's INFO, or its own PING
		}
		return fmt.Errorf("not a NATS server: PING answered %s", quote([]byte(line)))
	}
}

// probePostgres opens a session for the URL's user and database: with
// sslmode=disable a startup message at once, otherwise an SSLRequest first
// ('S' starts TLS, 'N' goes on in the clear unless sslmode requires TLS).
// The server's answers up to ReadyForQuery say whether the session opened;
// an ErrorResponse says why not (no such database, no such role). A server
// that asks for a password is taken as found: the probe does not log in.
func probePostgres(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return fmt.Errorf("not a postgres:// URL")
	}
	name := u.User.Username()
	if name == "" {
		if cur, err := user.Current(); err == nil {
			name = cur.Username
		}
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" {
		db = name
	}
	s, err := dial(hostPort(u, "5432"))
	if err != nil {
		return err
	}
	defer s.close()
	mode := u.Query().Get("sslmode")
	if mode != "disable" {
		// SSLRequest: length 8, code 80877103.
		if err := s.write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}); err != nil {
			return err
		}
		var answer [1]byte
		if err := s.readFull(answer[:]); err != nil {
			return err
		}
		switch {
		case answer[0] == 'S':
			verify := mode == "verify-ca" || mode == "verify-full"
			if err := s.startTLS(u.Hostname(), !verify); err != nil {
				return err
			}
		case answer[0] == 'N' && (mode == "" || mode == "prefer" || mode == "allow"):
		case answer[0] == 'N':
			return fmt.Errorf("the server does not offer TLS, which sslmode=%s requires", mode)
		default:
			return fmt.Errorf("not a PostgreSQL server: it answered the SSL request with %s", quote(answer[:]))
		}
	}
	// StartupMessage: length, protocol 3.0, then name/value pairs.
	var msg bytes.Buffer
	msg.Write([]byte{0, 0, 0, 0, 0, 3, 0, 0})
	for _, kv := range []string{"user", name, "database", db, "application_name", "sluice servicetest"} {
		msg.WriteString(kv)
		msg.WriteByte(0)
	}
	msg.WriteByte(0)
	b := msg.Bytes()
	binary.BigEndian.PutUint32(b, uint32(len(b)))
	if err := s.write(b); err != nil {
		return err
	}
	defer s.write([]byte{'X', 0, 0, 0, 4}) // Terminate
	for first := true; ; first = false {
		var head [5]byte
		if err := s.readFull(head[:]); err != nil {
			return err
		}
		n := binary.BigEndian.Uint32(head[1:])
		if first && head[0] != 'R' && head[0] != 'E' || n < 4 || n > maxAnswer {
			return fmt.Errorf("not a PostgreSQL server: it answered the startup message with %s", quote(head[:]))
		}
		body := make([]byte, n-4)
		if err := s.readFull(body); err != nil {
			return err
		}
		switch head[0] {
		case 'E':
			return fmt.Errorf("the server refused the session: %s", pgError(body))
		case 'R':
			if len(body) < 4 {
				return errors.New("not a PostgreSQL server: a short authentication request")
			}
			if binary.BigEndian.Uint32(body) != 0 {
				return nil // asks for a password: a PostgreSQL server that knows the user
			}
		case 'Z':
			return nil // ReadyForQuery: the session is open
		}
		// ParameterStatus, BackendKeyData and notices come before ReadyForQuery.
	}
}

// pgError formats the fields of an ErrorResponse: severity, code, message.
func pgError(body []byte) string {
	fields := map[byte]string{}
	for _, f := range bytes.Split(body, []byte{0}) {
		if len(f) > 1 {
			fields[f[0]] = string(f[1:])
		}
	}
	return fmt.Sprintf("%s %s: %s", fields['S'], fields['C'], fields['M'])
}

// probeMariaDB reads the greeting that a MySQL-protocol server (MariaDB,
// MySQL) sends first on a new connection: protocol version 10 and the
// server's version. An error packet in its place (too many connections, a
// host not allowed) says why the server will not talk. dsn is in
// go-sql-driver/mysql's form, user[:password]@tcp(host:port)/database; the
// probe does not log in.
func probeMariaDB(dsn string) error {
	addr, err := mysqlAddr(dsn)
	if err != nil {
		return err
	}
	s, err := dial(addr)
	if err != nil {
		return err
	}
	defer s.close()
	var head [4]byte
	if err := s.readFull(head[:]); err != nil {
		return err
	}
	n := int(head[0]) | int(head[1])<<8 | int(head[2])<<16
	if n < 1 || n > maxAnswer {
		return fmt.Errorf("not a MySQL-protocol server: it greeted with %s", quote(head[:]))
	}
	body := make([]byte, n)
	if err := s.readFull(body); err != nil {
		return err
	}
	switch body[0] {
	case 10:
		return nil
	case 0xff:
		msg := body[1:]
		if len(msg) >= 2 {
			msg = msg[2:] // the error code
		}
		return fmt.Errorf("the server refused the connection: %s", strings.TrimPrefix(string(msg), "#"))
	default:
		return fmt.Errorf("not a MySQL-protocol server: its greeting is protocol %d, not 10", body[0])
	}
}

// mysqlAddr is the host:port of a DSN in go-sql-driver/mysql's form; a DSN
// without an address means the driver's default, 127.0.0.1:3306.
func mysqlAddr(dsn string) (string, error) {
	at := strings.LastIndex(dsn, "@")
	rest := dsn[at+1:]
	slash := strings.Index(rest, "/")
	if slash < 0 {
		return "", errors.New("not a MySQL DSN: no /database part")
	}
	netAddr := rest[:slash]
	switch {
	case netAddr == "":
		return "127.0.0.1:3306", nil
	case strings.HasPrefix(netAddr, "tcp(") && strings.HasSuffix(netAddr, ")"):
		addr := netAddr[len("tcp(") : len(netAddr)-1]
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return addr + ":3306", nil
		}
		return addr, nil
	default:
		return "", fmt.Errorf("not a TCP MySQL DSN: the probe reads tcp(host:port), not %q", netAddr)
	}
}
