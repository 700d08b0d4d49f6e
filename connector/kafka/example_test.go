package kafka_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/pipeline"
)

// A group member consumes a topic, handles each key's records in order,
// and commits what settled. The cluster here is franz-go's in-process
// kfake; give Brokers your cluster's addresses instead.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		panic(err)
	}
	for _, v := range []string{"apples", "pears", "plums"} {
		cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Key: []byte("basket-1"), Value: []byte(v)})
	}

	src, err := kafka.NewSource(kafka.SourceConfig{
		Brokers: cluster.ListenAddrs(), Topic: "orders", Group: "billing",
	})
	if err != nil {
		panic(err)
	}
	b := pipeline.New("orders")
	msgs := pipeline.Source(b, "consume", src)
	var p *pipeline.Pipeline
	seen := 0
	pipeline.ForEach(b, "print", msgs, func(_ context.Context, m kafka.Message) error {
		fmt.Printf("%s %s at offset %d\n", m.Key, m.Value, m.Offset)
		if seen++; seen == 3 {
			p.Drain() // stop reading; what was read is committed at Close
		}
		return nil
	}, pipeline.Keyed(4, kafka.RecordKey))
	p, err = b.Build()
	if err != nil {
		panic(err)
	}
	if _, err := p.Run(ctx); err != nil {
		panic(err)
	}
	offsets, err := kadm.NewClient(cl).FetchOffsets(ctx, "billing")
	if err != nil {
		panic(err)
	}
	o, _ := offsets.Lookup("orders", 0)
	fmt.Println("committed:", o.At)
	// Output:
	// basket-1 apples at offset 0
	// basket-1 pears at offset 1
	// basket-1 plums at offset 2
	// committed: 3
}
