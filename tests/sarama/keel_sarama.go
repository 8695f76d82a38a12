// keel_sarama drives a Kafka broker (Keel) with Sarama, the Go Kafka client, as Debian bookworm
// packages it (golang-github-shopify-sarama-dev 1.22.1). It is built offline in GOPATH mode
// from Debian's sources by tests/python/test_sarama.py.
//
// Usage: keel_sarama SUBCOMMAND -brokers HOST:PORT -version KAFKA_VERSION [flags]
//
//	produce        -topic T -codec none|gzip|snappy|lz4|zstd -n N [-start S] [-partitions P]
//	consume-group  -topic T -group G -max N [-commit] [-claims K] [-barrier DIR -members M] [-linger D]
//	               [-retention D]
//	offsets        -topic T
//	admin          -topic T [-partitions P]
//	metadata       [-topic T]
//
// Every subcommand prints one JSON object per line on stdout ({"event": ...}), exits 0 on
// success and non-zero on failure (an {"event":"error"} line says why), and is bounded by
// -timeout (default 30s): past it the program prints {"event":"error","stage":"timeout"} and
// exits 3. -debug sends Sarama's own log to stderr.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io/ioutil"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

var outMu sync.Mutex

// emit prints one JSON line on stdout.
func emit(fields map[string]interface{}) {
	b, err := json.Marshal(fields)
	if err != nil {
		b = []byte(fmt.Sprintf(`{"event":"error","stage":"json","error":%q}`, err.Error()))
	}
	outMu.Lock()
	defer outMu.Unlock()
	os.Stdout.Write(append(b, '\n'))
}

func emitError(stage string, err error) {
	emit(map[string]interface{}{"event": "error", "stage": stage, "error": errText(err)})
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func fail(stage string, err error) {
	emitError(stage, err)
	os.Exit(1)
}

// parseVersion accepts Sarama's spellings (0.11.0.0, 2.2.0) and also 2.2.0.0 for versions >= 1,
// which Sarama 1.22's ParseKafkaVersion rejects.
func parseVersion(s string) (sarama.KafkaVersion, error) {
	v, err := sarama.ParseKafkaVersion(s)
	if err == nil {
		return v, nil
	}
	parts := strings.Split(s, ".")
	if len(parts) == 4 && parts[0] != "0" {
		if v2, err2 := sarama.ParseKafkaVersion(strings.Join(parts[:3], ".")); err2 == nil {
			return v2, nil
		}
	}
	return v, err
}

type common struct {
	brokers string
	version string
	timeout time.Duration
	debug   bool
	topic   string
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.brokers, "brokers", "127.0.0.1:9092", "comma-separated bootstrap brokers")
	fs.StringVar(&c.version, "version", sarama.MinVersion.String(), "Kafka version Sarama speaks (sarama.ParseKafkaVersion)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "overall deadline")
	fs.BoolVar(&c.debug, "debug", false, "Sarama's log on stderr")
	fs.StringVar(&c.topic, "topic", "", "topic")
}

// setup parses the version, arms the overall deadline, and returns a base config.
func (c *common) setup(sub string) (*sarama.Config, []string) {
	if c.debug {
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.Lmicroseconds)
	}
	v, err := parseVersion(c.version)
	if err != nil {
		fail("version", err)
	}
	time.AfterFunc(c.timeout, func() {
		emit(map[string]interface{}{"event": "error", "stage": "timeout",
			"error": fmt.Sprintf("%s did not finish within %s", sub, c.timeout)})
		os.Exit(3)
	})
	cfg := sarama.NewConfig()
	cfg.Version = v
	cfg.ClientID = "keel-sarama"
	cfg.Net.DialTimeout = 5 * time.Second
	cfg.Net.ReadTimeout = 10 * time.Second
	cfg.Net.WriteTimeout = 5 * time.Second
	cfg.Metadata.Retry.Max = 2
	cfg.Metadata.Retry.Backoff = 200 * time.Millisecond
	cfg.Admin.Timeout = 10 * time.Second
	emit(map[string]interface{}{"event": "start", "subcommand": sub, "version": v.String(),
		"sarama_max_version": sarama.MaxVersion.String()})
	return cfg, strings.Split(c.brokers, ",")
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: keel_sarama produce|consume-group|offsets|admin|metadata [flags]")
		os.Exit(2)
	}
	sub, args := os.Args[1], os.Args[2:]
	switch sub {
	case "produce":
		produce(args)
	case "consume-group":
		consumeGroup(args)
	case "offsets":
		offsets(args)
	case "admin":
		admin(args)
	case "metadata":
		metadata(args)
	default:
		fmt.Fprintf(os.Stderr, "unknown subcommand %q\n", sub)
		os.Exit(2)
	}
}

// ---------------------------------------------------------------------------------------------
// produce

func produce(args []string) {
	var c common
	fs := flag.NewFlagSet("produce", flag.ExitOnError)
	c.register(fs)
	codec := fs.String("codec", "none", "none|gzip|snappy|lz4|zstd")
	n := fs.Int("n", 10, "records")
	start := fs.Int("start", 0, "number of the first record (keys k-START...)")
	partitions := fs.Int("partitions", 0, "if > 0: record i goes to partition i % P (manual partitioner)")
	fs.Parse(args)
	cfg, brokers := c.setup("produce")

	switch *codec {
	case "none":
		cfg.Producer.Compression = sarama.CompressionNone
	case "gzip":
		cfg.Producer.Compression = sarama.CompressionGZIP
	case "snappy":
		cfg.Producer.Compression = sarama.CompressionSnappy
	case "lz4":
		cfg.Producer.Compression = sarama.CompressionLZ4
	case "zstd":
		cfg.Producer.Compression = sarama.CompressionZSTD
	default:
		fail("config", fmt.Errorf("unknown codec %q", *codec))
	}
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Timeout = 10 * time.Second
	cfg.Producer.Retry.Max = 1
	cfg.Producer.Retry.Backoff = 200 * time.Millisecond
	if *partitions > 0 {
		cfg.Producer.Partitioner = sarama.NewManualPartitioner
	}
	headers := cfg.Version.IsAtLeast(sarama.V0_11_0_0)

	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		fail("new-producer", err)
	}
	msgs := make([]*sarama.ProducerMessage, 0, *n)
	for i := *start; i < *start+*n; i++ {
		m := &sarama.ProducerMessage{
			Topic: c.topic,
			Key:   sarama.StringEncoder(fmt.Sprintf("k-%d", i)),
			Value: sarama.StringEncoder(fmt.Sprintf("v-%d", i)),
		}
		if headers {
			m.Headers = []sarama.RecordHeader{{Key: []byte("h"), Value: []byte(strconv.Itoa(i))}}
		}
		if *partitions > 0 {
			m.Partition = int32(i % *partitions)
		}
		msgs = append(msgs, m)
	}
	err = p.SendMessages(msgs)
	failedMsgs := map[*sarama.ProducerMessage]bool{}
	if err != nil {
		if perrs, ok := err.(sarama.ProducerErrors); ok {
			for _, pe := range perrs {
				failedMsgs[pe.Msg] = true
				key, _ := pe.Msg.Key.Encode()
				emit(map[string]interface{}{"event": "error", "stage": "produce", "key": string(key),
					"error": errText(pe.Err)})
			}
		} else {
			for _, m := range msgs {
				failedMsgs[m] = true
			}
			emitError("produce", err)
		}
	}
	ok := 0
	for _, m := range msgs {
		if failedMsgs[m] {
			continue
		}
		key, _ := m.Key.Encode()
		val, _ := m.Value.Encode()
		rec := map[string]interface{}{"event": "produced", "topic": m.Topic, "key": string(key),
			"value": string(val), "partition": m.Partition, "offset": m.Offset}
		if headers {
			rec["headers"] = map[string]string{"h": string(m.Headers[0].Value)}
		}
		emit(rec)
		ok++
	}
	if cerr := p.Close(); cerr != nil {
		emitError("close", cerr)
	}
	emit(map[string]interface{}{"event": "produce-done", "ok": ok, "failed": len(failedMsgs), "codec": *codec})
	if err != nil {
		os.Exit(1)
	}
}

// ---------------------------------------------------------------------------------------------
// consume-group

type groupHandler struct {
	max       int
	commit    bool
	wantClaim int // consume only in generations where this member holds exactly this many partitions (0: any)

	mu       sync.Mutex
	count    int
	done     chan struct{}
	doneOnce sync.Once
}

func claimCount(claims map[string][]int32) int {
	n := 0
	for _, ps := range claims {
		n += len(ps)
	}
	return n
}

func (h *groupHandler) Setup(s sarama.ConsumerGroupSession) error {
	claims := s.Claims()
	for _, ps := range claims {
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	}
	active := h.wantClaim == 0 || claimCount(claims) == h.wantClaim
	emit(map[string]interface{}{"event": "claims", "member": s.MemberID(), "generation": s.GenerationID(),
		"claims": claims, "active": active})
	return nil
}

func (h *groupHandler) Cleanup(s sarama.ConsumerGroupSession) error {
	emit(map[string]interface{}{"event": "cleanup", "member": s.MemberID(), "generation": s.GenerationID()})
	return nil
}

func (h *groupHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	if h.wantClaim != 0 && claimCount(s.Claims()) != h.wantClaim {
		// Not the assignment this run waits for (e.g. alone in the group before the other member
		// joined): read nothing, mark nothing, wait for the next rebalance.
		<-s.Context().Done()
		return nil
	}
	emit(map[string]interface{}{"event": "claim-start", "generation": s.GenerationID(),
		"topic": claim.Topic(), "partition": claim.Partition(), "initial_offset": claim.InitialOffset()})
	for {
		select {
		case <-s.Context().Done():
			return nil
		case msg, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			hdrs := map[string]string{}
			for _, rh := range msg.Headers {
				if rh != nil {
					hdrs[string(rh.Key)] = string(rh.Value)
				}
			}
			emit(map[string]interface{}{"event": "record", "generation": s.GenerationID(),
				"topic": msg.Topic, "partition": msg.Partition, "offset": msg.Offset,
				"key": string(msg.Key), "value": string(msg.Value), "headers": hdrs})
			if h.commit {
				s.MarkMessage(msg, "")
			}
			h.mu.Lock()
			h.count++
			reached := h.count >= h.max
			h.mu.Unlock()
			if reached {
				h.doneOnce.Do(func() { close(h.done) })
			}
		}
	}
}

// waitBarrier marks this member done in dir and waits until `members` members are.
func waitBarrier(dir string, members int, deadline time.Time) error {
	if dir == "" || members <= 1 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := ioutil.WriteFile(filepath.Join(dir, fmt.Sprintf("done-%d", os.Getpid())), nil, 0o644); err != nil {
		return err
	}
	for {
		entries, err := ioutil.ReadDir(dir)
		if err != nil {
			return err
		}
		n := 0
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "done-") {
				n++
			}
		}
		if n >= members {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("barrier: %d of %d members done", n, members)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func consumeGroup(args []string) {
	var c common
	fs := flag.NewFlagSet("consume-group", flag.ExitOnError)
	c.register(fs)
	group := fs.String("group", "", "consumer group id")
	max := fs.Int("max", 1, "stop after this many records")
	commit := fs.Bool("commit", false, "mark every record (auto commit every 200ms and at the end of a session)")
	claims := fs.Int("claims", 0, "consume only in a generation where this member holds exactly K partitions")
	barrier := fs.String("barrier", "", "directory where members mark themselves done")
	members := fs.Int("members", 1, "with -barrier: wait until this many members are done before leaving")
	linger := fs.Duration("linger", 0, "keep consuming this long after -max records (extra records are printed)")
	retention := fs.Duration("retention", 0, "Consumer.Offsets.Retention: 0 commits with OffsetCommit v1, > 0 with v2")
	fs.Parse(args)
	cfg, brokers := c.setup("consume-group")
	deadline := time.Now().Add(c.timeout - 5*time.Second)

	cfg.Consumer.Return.Errors = true
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.CommitInterval = 200 * time.Millisecond
	cfg.Consumer.Offsets.Retention = *retention
	cfg.Consumer.MaxWaitTime = 200 * time.Millisecond
	cfg.Consumer.Group.Session.Timeout = 10 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 300 * time.Millisecond
	cfg.Consumer.Group.Rebalance.Timeout = 10 * time.Second
	cfg.Consumer.Group.Rebalance.Retry.Max = 20
	cfg.Consumer.Group.Rebalance.Retry.Backoff = 300 * time.Millisecond

	cg, err := sarama.NewConsumerGroup(brokers, *group, cfg)
	if err != nil {
		fail("new-consumer-group", err)
	}
	// Errors reported by the group (failed commits, fetches, heartbeats): each distinct text is
	// printed for its first 3 occurrences; the counts come at the end.
	var errMu sync.Mutex
	errCounts := map[string]int{}
	errsDone := make(chan struct{})
	go func() {
		defer close(errsDone)
		for err := range cg.Errors() {
			errMu.Lock()
			errCounts[errText(err)]++
			n := errCounts[errText(err)]
			errMu.Unlock()
			if n <= 3 {
				emitError("group", err)
			}
		}
	}()

	h := &groupHandler{max: *max, commit: *commit, wantClaim: *claims, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{c.topic}, h); err != nil {
				emitError("consume", err)
				if err == sarama.ErrClosedConsumerGroup {
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(300 * time.Millisecond):
				}
			}
		}
	}()

	rc := 0
	select {
	case <-h.done:
	case <-time.After(time.Until(deadline)):
		h.mu.Lock()
		emit(map[string]interface{}{"event": "error", "stage": "consume",
			"error": fmt.Sprintf("got %d of %d records before the deadline", h.count, *max)})
		h.mu.Unlock()
		rc = 1
	}
	if rc == 0 && *linger > 0 {
		time.Sleep(*linger)
	}
	if rc == 0 {
		if err := waitBarrier(*barrier, *members, deadline); err != nil {
			emitError("barrier", err)
			rc = 1
		}
	}
	cancel()
	if err := cg.Close(); err != nil { // leaves the group; the session's last commit happens first
		emitError("close", err)
	}
	<-loopDone
	select {
	case <-errsDone:
	case <-time.After(2 * time.Second):
	}
	errMu.Lock()
	if len(errCounts) > 0 {
		emit(map[string]interface{}{"event": "error-counts", "counts": errCounts})
	}
	errMu.Unlock()
	h.mu.Lock()
	emit(map[string]interface{}{"event": "consume-done", "records": h.count})
	h.mu.Unlock()

	// What the group has committed now (OffsetFetch v1 from a fresh client).
	if err := printCommitted(brokers, cfg, *group, c.topic); err != nil {
		emitError("committed", err)
		rc = 1
	}
	os.Exit(rc)
}

func printCommitted(brokers []string, base *sarama.Config, group, topic string) error {
	cfg := sarama.NewConfig()
	cfg.Version = base.Version
	cfg.ClientID = base.ClientID
	cfg.Net = base.Net
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		return err
	}
	defer client.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		return err
	}
	coord, err := client.Coordinator(group)
	if err != nil {
		return err
	}
	req := &sarama.OffsetFetchRequest{Version: 1, ConsumerGroup: group}
	for _, p := range parts {
		req.AddPartition(topic, p)
	}
	resp, err := coord.FetchOffset(req)
	if err != nil {
		return err
	}
	for _, p := range parts {
		b := resp.GetBlock(topic, p)
		if b == nil {
			return fmt.Errorf("no OffsetFetch block for %s/%d", topic, p)
		}
		emit(map[string]interface{}{"event": "committed", "topic": topic, "partition": p,
			"offset": b.Offset, "error": errText(kerr(b.Err))})
	}
	return nil
}

func kerr(e sarama.KError) error {
	if e == sarama.ErrNoError {
		return nil
	}
	return e
}

// commonClient parses a subcommand's common flags and opens a client, or fails.
func commonClient(name string, args []string) (common, sarama.Client) {
	var c common
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	c.register(fs)
	fs.Parse(args)
	cfg, brokers := c.setup(name)
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		fail("new-client", err)
	}
	return c, client
}

// ---------------------------------------------------------------------------------------------
// offsets

func offsets(args []string) {
	c, client := commonClient("offsets", args)
	defer client.Close()
	parts, err := client.Partitions(c.topic)
	if err != nil {
		fail("partitions", err)
	}
	rc := 0
	for _, p := range parts {
		oldest, err1 := client.GetOffset(c.topic, p, sarama.OffsetOldest)
		newest, err2 := client.GetOffset(c.topic, p, sarama.OffsetNewest)
		ev := map[string]interface{}{"event": "offsets", "topic": c.topic, "partition": p,
			"oldest": oldest, "newest": newest}
		if err1 != nil || err2 != nil {
			ev["event"] = "error"
			ev["stage"] = "offsets"
			ev["error"] = strings.TrimSpace(errText(err1) + " " + errText(err2))
			rc = 1
		}
		emit(ev)
	}
	client.Close()
	os.Exit(rc)
}

// ---------------------------------------------------------------------------------------------
// admin

func admin(args []string) {
	var c common
	fs := flag.NewFlagSet("admin", flag.ExitOnError)
	c.register(fs)
	partitions := fs.Int("partitions", 3, "partitions of the created topic")
	fs.Parse(args)
	cfg, brokers := c.setup("admin")
	ca, err := sarama.NewClusterAdmin(brokers, cfg)
	if err != nil {
		fail("new-admin", err)
	}
	rc := 0
	step := func(name string, err error, extra map[string]interface{}) {
		ev := map[string]interface{}{"event": "admin", "step": name, "ok": err == nil, "error": errText(err)}
		for k, v := range extra {
			ev[k] = v
		}
		emit(ev)
		if err != nil {
			rc = 1
			// A broker that refuses a request version closes the connection, which Sarama's
			// admin would keep using: start the next step on a fresh client, so that each
			// step's result is its own.
			ca.Close()
			if ca, err = sarama.NewClusterAdmin(brokers, cfg); err != nil {
				fail("new-admin", err)
			}
		}
	}
	retention := "3600000"
	err = ca.CreateTopic(c.topic, &sarama.TopicDetail{NumPartitions: int32(*partitions), ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"retention.ms": &retention}}, false)
	step("create", err, nil)

	topics, err := ca.ListTopics()
	extra := map[string]interface{}{}
	if err == nil {
		d, found := topics[c.topic]
		extra["found"] = found
		extra["topics"] = len(topics)
		if found {
			extra["partitions"] = d.NumPartitions
			extra["replication_factor"] = d.ReplicationFactor
			cfgs := map[string]string{}
			for k, v := range d.ConfigEntries {
				if v != nil {
					cfgs[k] = *v
				}
			}
			extra["configs"] = cfgs
		}
	}
	step("list", err, extra)

	describeTopics := func(name string) {
		md, err := ca.DescribeTopics([]string{c.topic})
		extra := map[string]interface{}{}
		if err == nil {
			for _, t := range md {
				if t.Name == c.topic {
					extra["topic_error"] = errText(kerr(t.Err))
					extra["partitions"] = len(t.Partitions)
				}
			}
		}
		step(name, err, extra)
	}
	describeTopics("describe-topics")

	describeConfig := func(name string) {
		entries, err := ca.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: c.topic})
		extra := map[string]interface{}{}
		if err == nil {
			vals := map[string]string{}
			for _, e := range entries {
				vals[e.Name] = e.Value
				if e.Name == "retention.ms" {
					extra["retention_ms"] = e.Value
					extra["retention_ms_default"] = e.Default
				}
			}
			extra["entries"] = len(entries)
			extra["configs"] = vals
		}
		step(name, err, extra)
	}
	describeConfig("describe-config")

	altered := "7200000"
	err = ca.AlterConfig(sarama.TopicResource, c.topic, map[string]*string{"retention.ms": &altered}, false)
	step("alter-config", err, nil)
	describeConfig("describe-config-after-alter")

	err = ca.DeleteTopic(c.topic)
	step("delete", err, nil)
	// The deletion is visible in metadata (bounded wait).
	gone := false
	var lastErr error
	for i := 0; i < 30 && !gone; i++ {
		md, err := ca.DescribeTopics([]string{c.topic})
		lastErr = err
		if err == nil {
			gone = true
			for _, t := range md {
				if t.Name == c.topic && t.Err != sarama.ErrUnknownTopicOrPartition {
					gone = false
				}
			}
		}
		if !gone {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if !gone && lastErr == nil {
		lastErr = fmt.Errorf("topic %s still in metadata after delete", c.topic)
	}
	step("gone-after-delete", lastErr, map[string]interface{}{"gone": gone})
	ca.Close()
	os.Exit(rc)
}

// ---------------------------------------------------------------------------------------------
// metadata

func metadata(args []string) {
	c, client := commonClient("metadata", args)
	defer client.Close()
	for _, b := range client.Brokers() {
		emit(map[string]interface{}{"event": "broker", "id": b.ID(), "addr": b.Addr()})
	}
	topics, err := client.Topics()
	if err != nil {
		fail("topics", err)
	}
	sort.Strings(topics)
	emit(map[string]interface{}{"event": "topics", "topics": topics})
	want := topics
	if c.topic != "" {
		want = []string{c.topic}
	}
	rc := 0
	for _, t := range want {
		parts, err := client.Partitions(t)
		if err != nil {
			emit(map[string]interface{}{"event": "error", "stage": "partitions", "topic": t, "error": errText(err)})
			rc = 1
			continue
		}
		emit(map[string]interface{}{"event": "topic", "topic": t, "partitions": parts})
		for _, p := range parts {
			leader, err := client.Leader(t, p)
			ev := map[string]interface{}{"event": "partition", "topic": t, "partition": p}
			if err != nil {
				ev["event"] = "error"
				ev["stage"] = "leader"
				ev["error"] = errText(err)
				rc = 1
			} else {
				ev["leader"] = leader.ID()
				ev["leader_addr"] = leader.Addr()
			}
			emit(ev)
		}
	}
	client.Close()
	os.Exit(rc)
}
