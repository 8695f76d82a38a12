// kafkajs (the pure-JavaScript Kafka client) against the real `keel` binary.
//
// Run with tests/js/run.sh (installs the pinned kafkajs, then `node --test`). The broker is
// started once for the file exactly as tests/python/conftest.py starts it:
//   keel --listen 127.0.0.1:PORT --data-dir <mkdtemp> --smp 2 --admin off --set K=V ...
// KEEL_BIN chooses the binary (default ../../target/debug/keel relative to this file).
// KAFKAJS_LOG=debug prints kafkajs's own log (every request with its API version) to stderr.
// Every wait is bounded; each test uses its own topics and groups.

import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import kafkajs from 'kafkajs'

const { Kafka, logLevel, CompressionTypes, Partitioners, ConfigResourceTypes, AssignerProtocol } =
  kafkajs

// Extra `--set` settings of the broker.
// group.initial.rebalance.delay.ms=0: a group's first rebalance out of Empty completes at once
// (Kafka's default, 3 s, would add to every join here). If a keel build predates that setting it
// refuses to start ("unknown setting"); remove the entry only to run against such a build.
const EXTRA_SETTINGS = ['group.initial.rebalance.delay.ms=0']

const HERE = path.dirname(fileURLToPath(import.meta.url))
const KEEL_BIN =
  process.env.KEEL_BIN || path.normalize(path.join(HERE, '..', '..', 'target', 'debug', 'keel'))

const START_TIMEOUT_MS = 30_000
const STOP_TIMEOUT_MS = 15_000
const WAIT_MS = 30_000 // the bound of every wait for the broker or a client
const TEST_TIMEOUT_MS = 75_000
const CLIENT_ID = 'keel-js'

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))
const unique = prefix => `${prefix}-${crypto.randomBytes(4).toString('hex')}`

/** Polls `fn` until it returns something truthy; throws after `timeoutMs`. */
async function waitFor(what, fn, timeoutMs = WAIT_MS, intervalMs = 50) {
  const deadline = Date.now() + timeoutMs
  let lastErr
  for (;;) {
    try {
      const v = await fn()
      if (v) return v
    } catch (e) {
      lastErr = e
    }
    if (Date.now() >= deadline) {
      const desc = typeof what === 'function' ? what() : what
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${desc}` +
          (lastErr ? `; last error: ${lastErr.stack || lastErr}` : '')
      )
    }
    await sleep(intervalMs)
  }
}

// ---------------------------------------------------------------------------------------------
// The broker

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer()
    srv.on('error', reject)
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address()
      srv.close(() => resolve(port))
    })
  })
}

/** True when an ApiVersions v0 request on the port gets its answer with error code 0. */
function apiVersionsOk(port, timeoutMs = 1000) {
  return new Promise(resolve => {
    const sock = net.connect({ host: '127.0.0.1', port })
    let buf = Buffer.alloc(0)
    const done = ok => {
      clearTimeout(timer)
      sock.destroy()
      resolve(ok)
    }
    const timer = setTimeout(() => done(false), timeoutMs)
    sock.on('error', () => done(false))
    sock.on('close', () => done(false))
    sock.on('connect', () => {
      const clientId = Buffer.from('wait')
      const req = Buffer.alloc(10 + clientId.length)
      req.writeInt16BE(18, 0) // ApiVersions
      req.writeInt16BE(0, 2) // v0
      req.writeInt32BE(4242, 4) // correlation id
      req.writeInt16BE(clientId.length, 8)
      clientId.copy(req, 10)
      const size = Buffer.alloc(4)
      size.writeInt32BE(req.length, 0)
      sock.write(Buffer.concat([size, req]))
    })
    sock.on('data', chunk => {
      buf = Buffer.concat([buf, chunk])
      if (buf.length >= 10) done(buf.readInt32BE(4) === 4242 && buf.readInt16BE(8) === 0)
    })
  })
}

class KeelBroker {
  constructor(settings = []) {
    this.settings = settings
    this.proc = null
    this.exit = null
  }

  get bootstrap() {
    return `127.0.0.1:${this.port}`
  }

  alive() {
    return this.proc !== null && this.exit === null
  }

  async start() {
    if (!fs.existsSync(KEEL_BIN)) throw new Error(`keel binary not found at ${KEEL_BIN} (set KEEL_BIN)`)
    this.dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-data-'))
    this.logDir = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-log-'))
    this.logPath = path.join(this.logDir, 'keel.log')
    this.port = await freePort()
    const args = ['--listen', this.bootstrap, '--data-dir', this.dataDir, '--smp', '2', '--admin', 'off']
    for (const s of this.settings) args.push('--set', s)
    // keel reads KEEL_* variables as settings, so the test's own (KEEL_BIN) must not leak.
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('KEEL_')))
    env.RUST_LOG ??= 'info,openraft=warn'
    env.NO_COLOR ??= '1'
    fs.appendFileSync(this.logPath, `===== start: ${KEEL_BIN} ${args.join(' ')}\n`)
    const fd = fs.openSync(this.logPath, 'a')
    try {
      this.proc = spawn(KEEL_BIN, args, { stdio: ['ignore', fd, fd], env })
    } finally {
      fs.closeSync(fd)
    }
    this.exited = new Promise(resolve => {
      this.proc.on('exit', (code, signal) => {
        this.exit = { code, signal }
        resolve(this.exit)
      })
      this.proc.on('error', err => {
        this.exit = { code: null, signal: null, err }
        resolve(this.exit)
      })
    })
    const deadline = Date.now() + START_TIMEOUT_MS
    while (Date.now() < deadline) {
      if (this.exit) {
        throw new Error(
          `keel exited with ${JSON.stringify(this.exit)} during start-up\n${this.logTail()}`
        )
      }
      if (await apiVersionsOk(this.port)) return
      await sleep(50)
    }
    throw new Error(`keel did not answer on ${this.bootstrap} within ${START_TIMEOUT_MS} ms\n${this.logTail()}`)
  }

  /** The exit status, or null when the process is still running after `ms`. */
  waitExit(ms) {
    let timer
    const timeout = new Promise(resolve => (timer = setTimeout(() => resolve(null), ms)))
    return Promise.race([this.exited, timeout]).finally(() => clearTimeout(timer))
  }

  /** SIGTERM, wait (bounded), SIGKILL if still alive. */
  async stop() {
    if (!this.alive()) return this.exit
    this.proc.kill('SIGTERM')
    const started = Date.now()
    const termed = await this.waitExit(STOP_TIMEOUT_MS)
    this.stopMs = Date.now() - started
    if (termed) return termed
    this.proc.kill('SIGKILL')
    await this.waitExit(STOP_TIMEOUT_MS)
    throw new Error(`keel did not exit within ${STOP_TIMEOUT_MS} ms of SIGTERM (killed)`)
  }

  killNow() {
    if (this.alive()) this.proc.kill('SIGKILL')
  }

  cleanup() {
    for (const d of [this.dataDir, this.logDir]) {
      if (d) fs.rmSync(d, { recursive: true, force: true })
    }
  }

  logTail(lines = 80) {
    try {
      return fs
        .readFileSync(this.logPath, 'utf8')
        .replace(/\x1b\[[0-9;]*m/g, '')
        .split('\n')
        .slice(-lines)
        .join('\n')
    } catch {
      return ''
    }
  }
}

// ---------------------------------------------------------------------------------------------
// kafkajs's log: every request's API version is recorded (the versions negotiated with keel),
// and error responses are counted; the last entries are kept for a failing test's report.

const apiVersionsUsed = new Map() // "ApiName(key: K)" -> Set of versions
const errorResponses = new Map() // "ApiName(key: K, version: V) ERROR_TYPE" -> count
const recentLog = []
const LOG_LEVEL_NAMES = { 1: 'ERROR', 2: 'WARN', 4: 'INFO', 5: 'DEBUG' }
const printLog = (process.env.KAFKAJS_LOG || '').toLowerCase() === 'debug'

const logCreator = () => ({ namespace, level, log }) => {
  const { message, timestamp, logger: _logger, ...extra } = log
  let m = /^Request (\w+)\(key: (\d+), version: (\d+)\)/.exec(message)
  if (m) {
    const k = `${m[1]}(key: ${m[2]})`
    if (!apiVersionsUsed.has(k)) apiVersionsUsed.set(k, new Set())
    apiVersionsUsed.get(k).add(Number(m[3]))
  }
  m = /^Response (\w+\(key: \d+, version: \d+\))/.exec(message)
  if (m && level <= logLevel.WARN) {
    const k = `${m[1]} ${extra.error || '?'}`
    errorResponses.set(k, (errorResponses.get(k) || 0) + 1)
  }
  const line = `${timestamp} ${LOG_LEVEL_NAMES[level] || level} [${namespace}] ${message} ${JSON.stringify(extra)}`
  if (printLog) process.stderr.write(line + '\n')
  if (level <= logLevel.INFO) {
    recentLog.push(line)
    if (recentLog.length > 150) recentLog.shift()
  }
}

// ---------------------------------------------------------------------------------------------
// Fixture: one broker and one admin client for the whole file.

let broker
let kafka
let admin
let anyFailed = false

function killOnExit() {
  if (broker) broker.killNow()
}
process.on('exit', killOnExit)
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => {
    killOnExit()
    process.exit(130)
  })
}

before(async () => {
  broker = new KeelBroker(EXTRA_SETTINGS)
  try {
    await broker.start()
  } catch (e) {
    broker.killNow()
    broker.cleanup()
    throw e
  }
  kafka = new Kafka({
    clientId: CLIENT_ID,
    brokers: [broker.bootstrap],
    logLevel: logLevel.DEBUG,
    logCreator,
    connectionTimeout: 3000,
    requestTimeout: 30000,
    retry: { initialRetryTime: 100, maxRetryTime: 2000, retries: 8 },
  })
  admin = kafka.admin()
  await admin.connect()
})

after(async () => {
  try {
    if (admin) await admin.disconnect().catch(() => {})
  } finally {
    if (broker) {
      let stopErr
      try {
        const exit = await broker.stop()
        if (exit && exit.code !== 0 && exit.code !== null) {
          stopErr = new Error(`keel exited with ${JSON.stringify(exit)} on SIGTERM`)
        }
      } catch (e) {
        stopErr = e
      }
      if (anyFailed || stopErr) {
        process.stderr.write(`\n----- keel (${broker.bootstrap}) log tail -----\n${broker.logTail()}\n`)
      }
      broker.cleanup()
      process.stdout.write(`\n# keel exited ${JSON.stringify(broker.exit)} ${broker.stopMs} ms after SIGTERM\n`)
      const versions = [...apiVersionsUsed.entries()]
        .sort()
        .map(([k, v]) => `  ${k}: v${[...v].sort((a, b) => a - b).join(', v')}`)
      process.stdout.write(`\n# API versions kafkajs used with keel:\n${versions.join('\n')}\n`)
      const errors = [...errorResponses.entries()].sort().map(([k, n]) => `  ${k} x${n}`)
      process.stdout.write(`# error responses seen by kafkajs:\n${errors.join('\n') || '  none'}\n`)
      if (stopErr) throw stopErr
    }
  }
})

/** `fn`, printing kafkajs's recent log and keel's log tail when it fails. */
const withDiagnostics = (name, fn) => async t => {
  try {
    await fn(t)
  } catch (e) {
    anyFailed = true
    process.stderr.write(
      `\n----- [${name}] failed; kafkajs log (last ${recentLog.length} entries at INFO and above) -----\n` +
        recentLog.join('\n') +
        `\n----- keel log tail -----\n${broker ? broker.logTail(40) : ''}\n` +
        (broker && broker.exit ? `keel exited: ${JSON.stringify(broker.exit)}\n` : '')
    )
    throw e
  }
}

function ktest(name, fn) {
  test(name, { timeout: TEST_TIMEOUT_MS }, withDiagnostics(name, fn))
}

/** A subtest of `t`, with the same failure report. */
const subtest = (t, name, fn) => t.test(name, withDiagnostics(name, fn))

// ---------------------------------------------------------------------------------------------
// Client helpers

async function createTopic(topic, numPartitions, configEntries = []) {
  const created = await admin.createTopics({
    topics: [{ topic, numPartitions, replicationFactor: 1, configEntries }],
    waitForLeaders: true,
    timeout: 10000,
  })
  assert.equal(created, true, `createTopics(${topic}) reported the topic as not created`)
}

/**
 * A consumer in `groupId` subscribed to `topics`, already running. `records` collects every
 * record as {topic, partition, offset, key, value, headers, timestamp}; `joins`, `commits`,
 * `fetches` and `crashes` record the instrumentation events.
 */
async function startConsumer({ groupId, topics, fromBeginning = true, readUncommitted = false }) {
  const consumer = kafka.consumer({
    groupId,
    readUncommitted,
    maxWaitTimeInMs: 200,
    heartbeatInterval: 500,
    sessionTimeout: 10000,
    rebalanceTimeout: 10000,
    retry: { initialRetryTime: 100, maxRetryTime: 2000, retries: 8 },
  })
  const c = { consumer, records: [], joins: [], commits: [], fetches: 0, crashes: [] }
  consumer.on(consumer.events.GROUP_JOIN, e => c.joins.push(e.payload))
  consumer.on(consumer.events.COMMIT_OFFSETS, e => c.commits.push(e.payload))
  consumer.on(consumer.events.FETCH, () => c.fetches++)
  consumer.on(consumer.events.CRASH, e => c.crashes.push(String(e.payload.error && e.payload.error.stack)))
  await consumer.connect()
  await consumer.subscribe({ topics, fromBeginning })
  await consumer.run({
    eachMessage: async ({ topic, partition, message }) => {
      c.records.push({
        topic,
        partition,
        offset: Number(message.offset),
        key: message.key === null ? null : message.key.toString(),
        value: message.value === null ? null : message.value.toString(),
        headers: message.headers,
        timestamp: Number(message.timestamp),
      })
    },
  })
  return c
}

const lastAssignment = c => {
  const j = c.joins[c.joins.length - 1]
  return j ? j.memberAssignment : null
}

/** Committed offsets of the consumer's commit events: {topic: {partition: offset}}. */
function committedByEvents(...consumers) {
  const out = {}
  for (const c of consumers) {
    for (const p of c.commits) {
      for (const { topic, partitions } of p.topics) {
        out[topic] ??= {}
        for (const { partition, offset } of partitions) {
          out[topic][partition] = Math.max(out[topic][partition] ?? -1, Number(offset))
        }
      }
    }
  }
  return out
}

async function fetchOffsetsMap(groupId, topic) {
  const res = await admin.fetchOffsets({ groupId, topics: [topic] })
  const t = res.find(r => r.topic === topic)
  assert.ok(t, `fetchOffsets(${groupId}) has no entry for ${topic}: ${JSON.stringify(res)}`)
  return Object.fromEntries(t.partitions.map(p => [p.partition, Number(p.offset)]))
}

/** Checks per partition that offsets are exactly 0..n-1 (or start..start+n-1). */
function assertContiguous(records, numPartitions, starts = {}) {
  const counts = {}
  for (let p = 0; p < numPartitions; p++) {
    const offs = records.filter(r => r.partition === p).map(r => r.offset).sort((a, b) => a - b)
    const start = starts[p] ?? 0
    assert.deepEqual(
      offs,
      offs.map((_, i) => start + i),
      `partition ${p}: offsets are not ${start}..${start + offs.length - 1}: ${offs.join(',')}`
    )
    counts[p] = offs.length
  }
  return counts
}

// ---------------------------------------------------------------------------------------------
// Tests

ktest('admin: createTopics, listTopics, fetchTopicMetadata, describeConfigs, deleteTopics', async () => {
  const topic = unique('js-admin')
  await createTopic(topic, 3, [{ name: 'retention.ms', value: '3600000' }])

  const topics = await admin.listTopics()
  assert.ok(topics.includes(topic), `listTopics lacks ${topic}: ${JSON.stringify(topics)}`)

  const cluster = await admin.describeCluster()
  const nodeIds = cluster.brokers.map(b => b.nodeId)
  assert.equal(cluster.brokers.length, 1, `describeCluster: ${JSON.stringify(cluster)}`)
  assert.equal(cluster.brokers[0].port, broker.port)

  const md = await admin.fetchTopicMetadata({ topics: [topic] })
  assert.equal(md.topics.length, 1)
  assert.equal(md.topics[0].name, topic)
  const parts = [...md.topics[0].partitions].sort((a, b) => a.partitionId - b.partitionId)
  assert.deepEqual(parts.map(p => p.partitionId), [0, 1, 2], JSON.stringify(md))
  for (const p of parts) {
    assert.equal(p.partitionErrorCode, 0, `partition ${p.partitionId}: ${JSON.stringify(p)}`)
    assert.ok(nodeIds.includes(p.leader), `partition ${p.partitionId} leader ${p.leader} not in ${nodeIds}`)
    assert.deepEqual(p.replicas, [p.leader], `partition ${p.partitionId}: ${JSON.stringify(p)}`)
    assert.deepEqual(p.isr, [p.leader], `partition ${p.partitionId}: ${JSON.stringify(p)}`)
  }

  const one = await admin.describeConfigs({
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ['retention.ms'] }],
    includeSynonyms: false,
  })
  assert.equal(one.resources.length, 1)
  assert.equal(one.resources[0].errorCode, 0, JSON.stringify(one))
  assert.equal(one.resources[0].resourceName, topic)
  assert.deepEqual(
    one.resources[0].configEntries.map(e => [e.configName, e.configValue, e.isDefault]),
    [['retention.ms', '3600000', false]],
    JSON.stringify(one)
  )

  const all = await admin.describeConfigs({
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic }],
    includeSynonyms: false,
  })
  const byName = Object.fromEntries(all.resources[0].configEntries.map(e => [e.configName, e]))
  assert.equal(byName['retention.ms']?.configValue, '3600000', JSON.stringify(all))
  assert.equal(byName['cleanup.policy']?.configValue, 'delete', JSON.stringify(all))

  await admin.deleteTopics({ topics: [topic], timeout: 10000 })
  await waitFor(`${topic} to leave listTopics`, async () => !(await admin.listTopics()).includes(topic))
})

const PRODUCE_COUNT = 300
const PRODUCE_PARTITIONS = 3

function produceMessage(tag, i) {
  return {
    key: `key-${tag}-${i}`,
    value: `value-${tag}-${i}|` + 'abcdefghij'.repeat(i % 20) + '|compressible payload '.repeat(3),
    headers: {
      idx: String(i),
      tag,
      bin: Buffer.from([i & 0xff, (i >> 8) & 0xff, 0, 0xff]),
      multi: ['first', 'second'],
    },
  }
}

for (const idempotent of [true, false]) {
  for (const [codecName, codec] of [
    ['none', CompressionTypes.None],
    ['gzip', CompressionTypes.GZIP],
  ]) {
    const kind = `${idempotent ? 'idempotent' : 'plain'}-${codecName}`
    ktest(`producer (${kind}): ${PRODUCE_COUNT} keyed records with headers, read back by a group`, async () => {
      const topic = unique(`js-produce-${kind}`)
      await createTopic(topic, PRODUCE_PARTITIONS)
      const producer = kafka.producer({
        idempotent,
        maxInFlightRequests: idempotent ? 1 : 5,
        allowAutoTopicCreation: false,
        createPartitioner: Partitioners.DefaultPartitioner,
        retry: { initialRetryTime: 100, maxRetryTime: 2000, retries: 8 },
      })
      const t0 = Date.now()
      const messages = Array.from({ length: PRODUCE_COUNT }, (_, i) => produceMessage(kind, i))
      // The partition kafkajs's default (Java-compatible murmur2) partitioner picks for a key.
      const partitioner = Partitioners.DefaultPartitioner()
      const partitionMetadata = Array.from({ length: PRODUCE_PARTITIONS }, (_, p) => ({ partitionId: p, leader: 0 }))
      const expectedPartition = messages.map(message => partitioner({ topic, partitionMetadata, message }))

      await producer.connect()
      const nextOffset = {}
      try {
        for (let start = 0; start < PRODUCE_COUNT; start += 100) {
          const res = await producer.send({
            topic,
            acks: -1,
            compression: codec,
            messages: messages.slice(start, start + 100),
          })
          for (const r of res) {
            assert.equal(r.topicName, topic)
            assert.equal(r.errorCode, 0, JSON.stringify(r))
            // Each send's batch for a partition starts where the previous one ended.
            assert.equal(Number(r.baseOffset), nextOffset[r.partition] ?? 0, `baseOffset ${JSON.stringify(r)}`)
            const n = messages.slice(start, start + 100).filter((_, j) => expectedPartition[start + j] === r.partition).length
            nextOffset[r.partition] = Number(r.baseOffset) + n
          }
        }
      } finally {
        await producer.disconnect()
      }
      const used = new Set(expectedPartition)
      assert.equal(used.size, PRODUCE_PARTITIONS, 'the keys should spread over every partition')

      const c = await startConsumer({ groupId: unique(`js-produce-group-${kind}`), topics: [topic] })
      try {
        await waitFor(
          () => `${PRODUCE_COUNT} records (have ${c.records.length}; crashes ${c.crashes.length})`,
          () => c.records.length >= PRODUCE_COUNT
        )
        await sleep(300) // anything read twice would show up now
      } finally {
        await c.consumer.disconnect()
      }
      assert.deepEqual(c.crashes, [])
      assert.equal(c.records.length, PRODUCE_COUNT, 'records read more than once')

      const seen = new Set()
      for (const r of c.records) {
        const m = /^key-(.+)-(\d+)$/.exec(r.key)
        assert.ok(m && m[1] === kind, `unexpected key ${r.key}`)
        const i = Number(m[2])
        assert.ok(i >= 0 && i < PRODUCE_COUNT && !seen.has(i), `key ${r.key} out of range or repeated`)
        seen.add(i)
        const want = messages[i]
        assert.equal(r.topic, topic)
        assert.equal(r.value, want.value, `value of ${r.key}`)
        assert.equal(r.partition, expectedPartition[i], `partition of ${r.key}`)
        assert.deepEqual(Object.keys(r.headers).sort(), ['bin', 'idx', 'multi', 'tag'], `headers of ${r.key}`)
        assert.equal(r.headers.idx.toString(), String(i))
        assert.equal(r.headers.tag.toString(), kind)
        assert.ok(Buffer.isBuffer(r.headers.bin) && r.headers.bin.equals(want.headers.bin), `bin header of ${r.key}`)
        assert.ok(Array.isArray(r.headers.multi), `repeated header of ${r.key} is ${JSON.stringify(r.headers.multi)}`)
        assert.deepEqual(r.headers.multi.map(b => b.toString()), ['first', 'second'])
        assert.ok(r.timestamp >= t0 - 5000 && r.timestamp <= Date.now() + 5000, `timestamp ${r.timestamp} of ${r.key}`)
      }
      assert.equal(seen.size, PRODUCE_COUNT)

      const counts = assertContiguous(c.records, PRODUCE_PARTITIONS)
      for (let p = 0; p < PRODUCE_PARTITIONS; p++) {
        assert.equal(counts[p], nextOffset[p] ?? 0, `partition ${p}: read ${counts[p]}, produced up to ${nextOffset[p]}`)
        // Within a partition, offset order is the order the producer sent them in.
        const idx = c.records
          .filter(r => r.partition === p)
          .sort((a, b) => a.offset - b.offset)
          .map(r => Number(r.headers.idx.toString()))
        assert.deepEqual(idx, [...idx].sort((a, b) => a - b), `partition ${p}: records out of send order`)
      }
    })
  }
}

ktest('consumer group: two members share a 4-partition topic; commits are honoured', async t => {
  const topic = unique('js-group')
  const groupId = unique('js-group')
  const N = 200
  const P = 4
  await createTopic(topic, P)
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: false })
  await producer.connect()
  const members = []
  let late = null
  const state = { ready: false, counts: null }
  try {
    await subtest(t, 'both members join; the assignments cover every partition once; every record is read once; commits happen', async () => {
      const started = await Promise.allSettled([0, 1].map(() => startConsumer({ groupId, topics: [topic] })))
      members.push(...started.filter(r => r.status === 'fulfilled').map(r => r.value))
      for (const r of started) if (r.status === 'rejected') throw r.reason
      const [a, b] = members
      const describe = () =>
        `a stable group of two (a: ${JSON.stringify(a.joins.map(j => j.memberAssignment))}, ` +
        `b: ${JSON.stringify(b.joins.map(j => j.memberAssignment))}, crashes ${a.crashes.length + b.crashes.length})`
      await waitFor(describe, async () => {
        const pa = lastAssignment(a)?.[topic] ?? []
        const pb = lastAssignment(b)?.[topic] ?? []
        if (pa.length === 0 || pb.length === 0) return false
        if (a.joins.at(-1).leaderId !== b.joins.at(-1).leaderId) return false
        if (pa.length + pb.length !== P || new Set([...pa, ...pb]).size !== P) return false
        const { groups } = await admin.describeGroups([groupId])
        return groups[0].state === 'Stable' && groups[0].members.length === 2
      })
      const pa = [...lastAssignment(a)[topic]].sort()
      const pb = [...lastAssignment(b)[topic]].sort()
      assert.equal(pa.filter(p => pb.includes(p)).length, 0, `overlap: ${pa} / ${pb}`)
      assert.deepEqual([...pa, ...pb].sort(), [0, 1, 2, 3])
      assert.notEqual(a.joins.at(-1).memberId, b.joins.at(-1).memberId)
      assert.equal([a, b].filter(c => c.joins.at(-1).isLeader).length, 1, 'exactly one leader')

      // Produced after the group is stable: no rebalance moves a partition while it is read.
      const messages = Array.from({ length: N }, (_, i) => ({ key: `g-${i}`, value: `group-value-${i}`, partition: i % P }))
      for (let start = 0; start < N; start += 50) {
        await producer.send({ topic, acks: -1, messages: messages.slice(start, start + 50) })
      }
      await waitFor(
        () => `${N} records (a ${a.records.length}, b ${b.records.length})`,
        () => a.records.length + b.records.length >= N
      )
      await sleep(300)
      const all = [...a.records, ...b.records]
      assert.equal(all.length, N, `read ${all.length} records for ${N} produced`)
      assert.deepEqual(all.map(r => r.key).sort(), messages.map(m => m.key).sort(), 'every record exactly once')
      for (const r of all) assert.equal(r.value, `group-value-${r.key.slice(2)}`)
      for (const r of a.records) assert.ok(pa.includes(r.partition), `member a read unassigned partition ${r.partition}`)
      for (const r of b.records) assert.ok(pb.includes(r.partition), `member b read unassigned partition ${r.partition}`)
      state.counts = assertContiguous(all, P)
      for (let p = 0; p < P; p++) assert.equal(state.counts[p], N / P)

      // Each member commits what it read (kafkajs auto-commits after each batch).
      await waitFor(
        () => `commits up to the end of every partition (have ${JSON.stringify(committedByEvents(a, b))})`,
        () => {
          const done = committedByEvents(a, b)[topic] ?? {}
          return [0, 1, 2, 3].every(p => done[p] === N / P)
        }
      )
      assert.ok(a.commits.length > 0 && b.commits.length > 0, 'both members committed')
      for (const c of [a, b]) {
        for (const p of c.commits) {
          assert.equal(p.groupId, groupId)
          assert.equal(p.memberId, c.joins.at(-1).memberId)
        }
      }
      assert.deepEqual([...a.crashes, ...b.crashes], [])
      state.ready = true
    })

    await subtest(t, 'admin.describeGroups and admin.fetchOffsets show the group and its commits', async () => {
      assert.ok(state.ready, 'the previous step failed')
      const [a, b] = members
      const { groups } = await admin.describeGroups([groupId])
      assert.equal(groups.length, 1)
      const g = groups[0]
      assert.equal(g.errorCode, 0, JSON.stringify(g))
      assert.equal(g.groupId, groupId)
      assert.equal(g.state, 'Stable')
      assert.equal(g.protocolType, 'consumer')
      assert.equal(g.protocol, a.joins.at(-1).groupProtocol)
      assert.equal(g.members.length, 2)
      const byId = Object.fromEntries(g.members.map(m => [m.memberId, m]))
      for (const c of [a, b]) {
        const j = c.joins.at(-1)
        const m = byId[j.memberId]
        assert.ok(m, `member ${j.memberId} missing from describeGroups: ${Object.keys(byId)}`)
        assert.equal(m.clientId, CLIENT_ID)
        const assignment = AssignerProtocol.MemberAssignment.decode(m.memberAssignment)
        assert.deepEqual(
          [...assignment.assignment[topic]].sort(),
          [...j.memberAssignment[topic]].sort(),
          `describeGroups assignment of ${j.memberId}`
        )
        const metadata = AssignerProtocol.MemberMetadata.decode(m.memberMetadata)
        assert.deepEqual(metadata.topics, [topic])
      }
      const offsets = await fetchOffsetsMap(groupId, topic)
      assert.deepEqual(offsets, { 0: N / P, 1: N / P, 2: N / P, 3: N / P })
      const listed = await admin.listGroups()
      assert.ok(
        listed.groups.some(x => x.groupId === groupId && x.protocolType === 'consumer'),
        `listGroups: ${JSON.stringify(listed)}`
      )
    })

    await subtest(t, 'after both leave, a new member reads nothing old, then exactly 5 new records', async () => {
      assert.ok(state.ready, 'the first step failed')
      await Promise.all(members.splice(0).map(c => c.consumer.disconnect()))
      await waitFor(
        'the group to be Empty after both members left',
        async () => {
          const { groups } = await admin.describeGroups([groupId])
          return groups[0].state === 'Empty' && groups[0].members.length === 0
        }
      )
      assert.deepEqual(await fetchOffsetsMap(groupId, topic), { 0: N / P, 1: N / P, 2: N / P, 3: N / P })

      late = await startConsumer({ groupId, topics: [topic], fromBeginning: true })
      await waitFor(
        () => `the new member to get all 4 partitions (${JSON.stringify(late.joins)})`,
        () => (lastAssignment(late)?.[topic] ?? []).length === P
      )
      const fetchesAtJoin = late.fetches
      await waitFor('three fetches by the new member', () => late.fetches >= fetchesAtJoin + 3)
      assert.deepEqual(late.records, [], 'the new member read records its group had committed')

      const fresh = Array.from({ length: 5 }, (_, i) => ({ key: `new-${i}`, value: `new-value-${i}`, partition: i % P }))
      await producer.send({ topic, acks: -1, messages: fresh })
      await waitFor(() => `5 new records (have ${late.records.length})`, () => late.records.length >= 5)
      await sleep(300)
      assert.equal(late.records.length, 5)
      assert.deepEqual(
        late.records.map(r => [r.key, r.value, r.partition]).sort(),
        fresh.map(m => [m.key, m.value, m.partition]).sort()
      )
      // Offsets continue after the committed ones: partition 0 got two, the others one.
      const byPart = {}
      for (const r of late.records) (byPart[r.partition] ??= []).push(r.offset)
      for (const v of Object.values(byPart)) v.sort((x, y) => x - y)
      assert.deepEqual(byPart, { 0: [N / P, N / P + 1], 1: [N / P], 2: [N / P], 3: [N / P] })
      await waitFor(
        () => `the new member's commits (have ${JSON.stringify(committedByEvents(late))})`,
        () => {
          const done = committedByEvents(late)[topic] ?? {}
          return done[0] === N / P + 2 && [1, 2, 3].every(p => done[p] === N / P + 1)
        }
      )
      assert.deepEqual(await fetchOffsetsMap(groupId, topic), { 0: N / P + 2, 1: N / P + 1, 2: N / P + 1, 3: N / P + 1 })
      assert.deepEqual(late.crashes, [])
    })
  } finally {
    await Promise.all([
      ...members.map(c => c.consumer.disconnect().catch(() => {})),
      late ? late.consumer.disconnect().catch(() => {}) : null,
      producer.disconnect().catch(() => {}),
    ])
  }
})

ktest('transactions: a read_committed consumer sees committed transactions only', async t => {
  const topic = unique('js-txn')
  const P = 2
  const K = 10 // records per partition per transaction
  await createTopic(topic, P)
  const producer = kafka.producer({
    transactionalId: unique('js-txn-id'),
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
    createPartitioner: Partitioners.DefaultPartitioner,
    retry: { initialRetryTime: 100, maxRetryTime: 2000, retries: 8 },
  })
  const batch = tag =>
    Array.from({ length: P * K }, (_, i) => ({
      key: `${tag}-${i}`,
      value: `txn-${tag}-${i}`,
      partition: i % P,
      headers: { tag },
    }))
  await producer.connect()
  try {
    for (const [tag, outcome] of [
      ['commit1', 'commit'],
      ['abort', 'abort'],
      ['commit2', 'commit'],
    ]) {
      const txn = await producer.transaction()
      try {
        const res = await txn.send({ topic, acks: -1, messages: batch(tag) })
        for (const r of res) assert.equal(r.errorCode, 0, JSON.stringify(r))
      } catch (e) {
        await txn.abort().catch(() => {})
        throw e
      }
      if (outcome === 'commit') await txn.commit()
      else await txn.abort()
    }
  } finally {
    await producer.disconnect()
  }
  // Per partition: commit1 at 0..K-1, its marker at K, the aborted records at K+1..2K, their
  // marker at 2K+1, commit2 at 2K+2..3K+1, its marker at 3K+2: the high watermark is 3K+3.
  await waitFor(
    `high watermark ${3 * K + 3} on every partition`,
    async () => (await admin.fetchTopicOffsets(topic)).every(o => Number(o.high) === 3 * K + 3)
  )

  const expectOffsets = (records, tags) => {
    for (let p = 0; p < P; p++) {
      const got = records.filter(r => r.partition === p).sort((a, b) => a.offset - b.offset)
      const want = []
      for (const tag of tags) {
        const base = { commit1: 0, abort: K + 1, commit2: 2 * K + 2 }[tag]
        for (let j = 0; j < K; j++) want.push([`${tag}-${j * P + p}`, base + j])
      }
      assert.deepEqual(got.map(r => [r.key, r.offset]), want, `partition ${p}`)
    }
  }

  await subtest(t, 'readUncommitted=false: only the two committed transactions', async () => {
    const c = await startConsumer({ groupId: unique('js-txn-rc'), topics: [topic], readUncommitted: false })
    try {
      await waitFor(() => `${2 * P * K} committed records (have ${c.records.length})`, () => c.records.length >= 2 * P * K)
      await sleep(300)
    } finally {
      await c.consumer.disconnect()
    }
    const tags = c.records.map(r => r.headers.tag.toString())
    assert.equal(tags.filter(x => x === 'abort').length, 0, 'a read_committed consumer read aborted records')
    assert.equal(c.records.length, 2 * P * K)
    for (const r of c.records) assert.equal(r.value, `txn-${r.key}`)
    expectOffsets(c.records, ['commit1', 'commit2'])
  })

  await subtest(t, 'readUncommitted=true: the aborted records too (Kafka semantics)', async () => {
    const c = await startConsumer({ groupId: unique('js-txn-ru'), topics: [topic], readUncommitted: true })
    try {
      await waitFor(() => `${3 * P * K} records (have ${c.records.length})`, () => c.records.length >= 3 * P * K)
      await sleep(300)
    } finally {
      await c.consumer.disconnect()
    }
    assert.equal(c.records.length, 3 * P * K)
    expectOffsets(c.records, ['commit1', 'abort', 'commit2'])
  })
})
