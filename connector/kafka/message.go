package kafka

import (
	"strconv"
	"strings"
	"time"
)

// A Message is one record of a topic, as a [Source] emits it. The source
// commits its offset once the pipeline is done with it (and with every
// record before it in its partition); user code never does.
//
// A Message is a value: copies share Key, Value and Headers, which must
// not be changed. It implements deadletter.Correlated: its envelope
// carries the record's topic, partition and offset.
type Message struct {
	// Topic is the topic the record was read from.
	Topic string `json:"topic"`
	// Partition is the record's partition of Topic.
	Partition int32 `json:"partition"`
	// Offset is the record's offset in its partition: it names the record
	// for every delivery of it.
	Offset int64 `json:"offset"`
	// Key is the record's key; nil for a record without one. Records of
	// one key go to one partition, in order (see [RecordKey]). Its JSON
	// is null for no key and "" for an empty one, so that a dead letter
	// re-driven keeps the difference, which RecordKey makes.
	Key []byte `json:"key"`
	// Value is the record's payload.
	Value []byte `json:"value"`
	// Headers are the record's headers, in order; nil when it has none.
	Headers []Header `json:"headers,omitempty"`
	// Timestamp is the record's timestamp: when it was produced, or when
	// the broker appended it, as the topic says.
	Timestamp time.Time `json:"timestamp,omitzero"`
	// Deliveries is how many times the record was emitted, this one
	// included (1 the first time), as far as the source knows: Kafka
	// keeps no count of reads, so a record read again by another process
	// (after a crash, or a rebalance inside the duplicate window) starts
	// at 1 there.
	Deliveries int `json:"deliveries"`

	r *record
}

// A Header is one header of a record. Kafka allows a key more than once.
type Header struct {
	// Key is the header's name.
	Key string `json:"key"`
	// Value is the header's value; nil and empty are the same to Kafka.
	Value []byte `json:"value,omitempty"`
}

// Header returns the value of the last header named key, and whether
// there is one.
func (m Message) Header(key string) ([]byte, bool) {
	for i := len(m.Headers) - 1; i >= 0; i-- {
		if m.Headers[i].Key == key {
			return m.Headers[i].Value, true
		}
	}
	return nil, false
}

// CorrelationID returns the record's topic, partition and offset, such as
// "orders/2/1041": the same for every read of the record, and unique in
// the cluster.
func (m Message) CorrelationID() string {
	if m.Topic == "" {
		return ""
	}
	return m.Topic + "/" + strconv.FormatInt(int64(m.Partition), 10) + "/" + strconv.FormatInt(m.Offset, 10)
}

// RecordKey returns the key to give pipeline.Keyed for records of a
// topic: the record's key, or, for a record without one, its partition
// (as "partition/<n>"), so that unkeyed records keep their partition's
// order. A keyed record's key is written "key/<key>", so that the two
// never meet.
//
//	pipeline.Transform(b, "apply", msgs, apply, pipeline.Keyed(8, kafka.RecordKey))
func RecordKey(m Message) string {
	if m.Key == nil {
		return "partition/" + strconv.FormatInt(int64(m.Partition), 10)
	}
	return "key/" + string(m.Key)
}

// TraceHeaders returns the W3C trace context the record was produced
// with, its traceparent and tracestate headers; nil when it has none.
// Give it to the source's node as
// pipeline.SourceTraceHeaders(kafka.TraceHeaders), and a traced run links
// each attempt on the record to the producer's span.
func TraceHeaders(m Message) map[string]string {
	var h map[string]string
	for _, hd := range m.Headers {
		for _, w := range []string{"traceparent", "tracestate"} {
			if strings.EqualFold(hd.Key, w) && len(hd.Value) > 0 {
				if h == nil {
					h = make(map[string]string, 2)
				}
				h[w] = string(hd.Value)
			}
		}
	}
	return h
}
