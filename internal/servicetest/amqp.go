package servicetest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// probeRabbitMQ opens and closes an AMQP 0-9-1 connection as a client
// library does: the protocol header, connection.start answered with a
// PLAIN login (the URL's user and password, guest/guest by default),
// connection.tune, connection.open of the URL's virtual host, then
// connection.close. A refused login or virtual host fails the probe with
// the broker's reason; so does a server that answers something else than
// AMQP 0-9-1 frames.
func probeRabbitMQ(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	port := "5672"
	switch u.Scheme {
	case "amqp":
	case "amqps":
		port = "5671"
	default:
		return errors.New("not an amqp:// or amqps:// URL")
	}
	name, pass := "guest", "guest"
	if u.User != nil {
		name = u.User.Username()
		pass, _ = u.User.Password()
	}
	vhost := "/"
	if p := u.Path; p != "" && p != "/" {
		vhost = strings.TrimPrefix(p, "/")
	}
	s, err := dial(hostPort(u, port))
	if err != nil {
		return err
	}
	defer s.close()
	if u.Scheme == "amqps" {
		if err := s.startTLS(u.Hostname(), false); err != nil {
			return err
		}
	}
	if err := s.write([]byte("AMQP\x00\x00\x09\x01")); err != nil {
		return err
	}
	args, err := s.readMethod(10, 10) // connection.start
	if err != nil {
		return err
	}
	if len(args) < 2 || args[0] != 0 || args[1] != 9 {
		return fmt.Errorf("not an AMQP 0-9-1 broker: connection.start of version %s", quote(args[:min(2, len(args))]))
	}

	// connection.start-ok: client properties asking for a connection.close
	// with the reason when the login fails (rather than a bare close),
	// the mechanism, the response, the locale.
	var ok amqpArgs
	caps := amqpArgs{}
	caps.shortstr("authentication_failure_close")
	caps.WriteByte('t')
	caps.WriteByte(1)
	props := amqpArgs{}
	props.shortstr("capabilities")
	props.WriteByte('F')
	props.longstr(caps.Bytes())
	ok.longstr(props.Bytes())
	ok.shortstr("PLAIN")
	ok.longstr([]byte("\x00" + name + "\x00" + pass))
	ok.shortstr("en_US")
	if err := s.writeMethod(10, 11, ok.Bytes()); err != nil {
		return err
	}
	tune, err := s.readMethod(10, 30) // connection.tune
	if err != nil {
		return err
	}
	if len(tune) < 8 {
		return errors.New("not an AMQP 0-9-1 broker: a short connection.tune")
	}
	if err := s.writeMethod(10, 31, tune[:8]); err != nil { // tune-ok: the broker's values
		return err
	}
	var open amqpArgs
	open.shortstr(vhost)
	open.shortstr("")
	open.WriteByte(0)
	if err := s.writeMethod(10, 40, open.Bytes()); err != nil {
		return err
	}
	if _, err := s.readMethod(10, 41); err != nil { // connection.open-ok
		return err
	}
	var closing amqpArgs
	closing.Write([]byte{0, 200})
	closing.shortstr("probe done")
	closing.Write([]byte{0, 0, 0, 0})
	if err := s.writeMethod(10, 50, closing.Bytes()); err != nil {
		return err
	}
	_, err = s.readMethod(10, 51) // connection.close-ok
	return err
}

// amqpArgs builds the arguments of an AMQP method.
type amqpArgs struct{ bytes.Buffer }

func (a *amqpArgs) shortstr(s string) {
	a.WriteByte(byte(len(s)))
	a.WriteString(s)
}

func (a *amqpArgs) longstr(b []byte) {
	a.Write(binary.BigEndian.AppendUint32(nil, uint32(len(b))))
	a.Write(b)
}

// writeMethod sends a method frame on channel 0.
func (s *session) writeMethod(class, method uint16, args []byte) error {
	f := []byte{1, 0, 0}
	f = binary.BigEndian.AppendUint32(f, uint32(4+len(args)))
	f = binary.BigEndian.AppendUint16(f, class)
	f = binary.BigEndian.AppendUint16(f, method)
	f = append(f, args...)
	return s.write(append(f, 0xce))
}

// readMethod reads a method frame and returns its arguments when it is
// class.method; a connection.close instead is the broker's refusal, and
// its reason the error.
func (s *session) readMethod(class, method uint16) ([]byte, error) {
	var head [7]byte
	if err := s.readFull(head[:]); err != nil {
		return nil, err
	}
	if string(head[:4]) == "AMQP" {
		return nil, fmt.Errorf("the broker does not speak AMQP 0-9-1: it answered with its protocol header %s", quote(head[:]))
	}
	size := binary.BigEndian.Uint32(head[3:])
	if head[0] != 1 || size < 4 || size > maxAnswer {
		return nil, fmt.Errorf("not an AMQP 0-9-1 broker: it answered %s", quote(head[:]))
	}
	body := make([]byte, size+1)
	if err := s.readFull(body); err != nil {
		return nil, err
	}
	if body[size] != 0xce {
		return nil, errors.New("not an AMQP 0-9-1 broker: a frame without its end marker")
	}
	c, m, args := binary.BigEndian.Uint16(body), binary.BigEndian.Uint16(body[2:]), body[4:size]
	switch {
	case c == class && m == method:
		return args, nil
	case c == 10 && m == 50 && len(args) >= 3:
		code := binary.BigEndian.Uint16(args)
		text := args[3:min(len(args), 3+int(args[2]))]
		return nil, fmt.Errorf("the broker closed the connection: %d %s", code, text)
	}
	return nil, fmt.Errorf("not an AMQP 0-9-1 broker: method %d.%d where %d.%d was due", c, m, class, method)
}
