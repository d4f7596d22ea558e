// Appends S sessions × E events at concurrency C through ADK JS's own
// DatabaseSessionService, and prints appends/s, p50/p99 latency of the
// appends (session creation not counted) and node's CPU time for them. The
// event is the one of adksession's append benchmarks: a 200-byte model text
// reply whose state delta sets a session key, a user: key and a temp: key,
// with a new invocation every 5 events. Run by bench.sh; see
// docs/benchmarks.md.
//
//   node bench.mjs postgres://... [S] [E] [C]
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { DatabaseSessionService, createEvent } from '@google/adk';

const [url, S = '100', E = '50', C = '10'] = process.argv.slice(2);
const sessions = Number(S), events = Number(E), concurrency = Number(C);
if (!url || !(sessions > 0 && events > 0 && concurrency > 0)) {
  console.error('usage: node bench.mjs DATABASE_URL [SESSIONS] [EVENTS] [CONCURRENCY]');
  process.exit(2);
}

const require = createRequire(import.meta.url);
const adkVersion = JSON.parse(readFileSync(require.resolve('@google/adk/package.json'), 'utf8')).version;

const text = 'The quick brown fox jumps over the lazy dog. '.repeat(5).slice(0, 200);

// event is the j-th event of a session.
function event(j) {
  return createEvent({
    invocationId: `inv-${Math.floor(j / 5)}`,
    author: 'agent',
    content: { role: 'model', parts: [{ text }] },
    actions: { stateDelta: { counter: j, 'user:last': j, 'temp:step': j % 5 } },
  });
}

// percentile is the p-th percentile (nearest rank) of sorted ms values.
function percentile(sorted, p) {
  const i = Math.ceil((p / 100) * sorted.length) - 1;
  return sorted[Math.max(0, Math.min(i, sorted.length - 1))];
}

const svc = new DatabaseSessionService(url);
await svc.init(); // creates ADK's tables in the (fresh) database
const app = 'bench';
const runId = new Date().toISOString();
const list = [];
for (let i = 0; i < sessions; i++) {
  list.push(await svc.createSession({
    appName: app, userId: `user-${i % Math.max(1, Math.floor(sessions / 4))}`, sessionId: `bench-${runId}-${i}`,
  }));
}

// As adksession's load generator: jobs round robin over the sessions, C
// workers, one session appended to by one worker at a time, in order.
const jobs = [];
for (let j = 0; j < events; j++) for (let s = 0; s < sessions; s++) jobs.push(s);
const busy = new Array(sessions).fill(Promise.resolve());
const next = new Array(sessions).fill(0);
const lat = [];
let cursor = 0;
const cpu0 = process.cpuUsage();
const start = performance.now();
async function worker() {
  while (cursor < jobs.length) {
    const s = jobs[cursor++];
    let release;
    const prev = busy[s];
    busy[s] = new Promise((r) => { release = r; });
    await prev;
    const ev = event(next[s]++);
    const t0 = performance.now();
    await svc.appendEvent({ session: list[s], event: ev });
    lat.push(performance.now() - t0);
    release();
  }
}
await Promise.all(Array.from({ length: concurrency }, worker));
const elapsed = (performance.now() - start) / 1000;
const cpu = process.cpuUsage(cpu0);
lat.sort((a, b) => a - b);

// What the database holds: every event, the last session and user values,
// no temp: key.
for (const s of [0, sessions - 1]) {
  const got = await svc.getSession({ appName: app, userId: list[s].userId, sessionId: list[s].id });
  const bad = got.events.length !== events || got.state.counter !== events - 1 ||
    got.state['user:last'] === undefined || 'temp:step' in got.state;
  if (bad) {
    console.error(`session ${s}: ${got.events.length} events, state ${JSON.stringify(got.state)}; want ${events} events, counter ${events - 1}`);
    process.exit(1);
  }
}

console.log(`ADK JS ${adkVersion} DatabaseSessionService: ${sessions} sessions × ${events} events, concurrency ${concurrency}`);
console.log(`appends       ${lat.length} in ${elapsed.toFixed(3)}s = ${(lat.length / elapsed).toFixed(0)}/s   ` +
  `p50 ${percentile(lat, 50).toFixed(2)}ms   p99 ${percentile(lat, 99).toFixed(2)}ms`);
console.log(`node cpu      ${((cpu.user + cpu.system) / lat.length).toFixed(0)}µs per append ` +
  `(${((cpu.user + cpu.system) / 1e6 / elapsed * 100).toFixed(0)}% of one core during the appends)`);
process.exit(0); // the ORM's pool keeps the process alive otherwise
