// ADK JS 2.0.0's own DatabaseSessionService on a database adksession writes
// to, for integration/adkjs_test.go (TestADKJSCompaction):
//
//   node compaction.mjs DATABASE_URL APP USER READ_SESSION [WRITE_SESSION]
//
// reads session READ_SESSION, and, when WRITE_SESSION is given, first
// creates that session and appends to it, through ADK JS: a user text, a
// model reply, an ADK JS compacted event (createCompactedEvent, as its
// LlmSummarizer builds one) covering the two, a scratchpad compacted event
// (as its AnchoredContextCompactor) and a model reply after them. It prints
// one JSON object: for each session, what getSession answered, with what
// ADK JS's own isCompactedEvent, isScratchpadEvent and getActiveEvents
// (the events its context building keeps) say of it.
import { DatabaseSessionService, createEvent, isCompactedEvent, isScratchpadEvent } from '@google/adk';
import { createCompactedEvent } from './node_modules/@google/adk/dist/esm/events/compacted_event.js';
import { getActiveEvents } from './node_modules/@google/adk/dist/esm/context/compaction_utils.js';

const [url, appName, userId, readId, writeId] = process.argv.slice(2);
if (!url || !appName || !userId || !readId) {
  console.error('usage: node compaction.mjs DATABASE_URL APP USER READ_SESSION [WRITE_SESSION]');
  process.exit(2);
}

const svc = new DatabaseSessionService(url);
await svc.init();

// Timestamps are epoch ms, one ms apart at least, as ADK JS's Date.now().
let clock = Date.now();
const at = () => (clock += 5);

async function write(sessionId) {
  const session = await svc.createSession({ appName, userId, sessionId, state: { phase: 'start' } });
  const append = (event) => svc.appendEvent({ session, event });
  const q = await append(createEvent({
    invocationId: 'js-inv-1', author: 'user', timestamp: at(),
    content: { role: 'user', parts: [{ text: 'question' }] },
  }));
  const a = await append(createEvent({
    invocationId: 'js-inv-1', author: 'agent', timestamp: at(),
    content: { role: 'model', parts: [{ text: 'answer' }] },
    actions: { stateDelta: { phase: 'answered' } },
  }));
  await append(createCompactedEvent({
    invocationId: 'js-inv-2', author: 'system', timestamp: at(),
    content: { role: 'model', parts: [{ text: 'summary of two' }] },
    startTime: q.timestamp, endTime: a.timestamp, compactedContent: 'summary of two',
  }));
  await append(createCompactedEvent({
    invocationId: 'js-inv-2', author: 'system', timestamp: at(),
    startTime: q.timestamp, endTime: a.timestamp, compactedContent: 'scratchpad', isScratchpad: true,
  }));
  await append(createEvent({
    invocationId: 'js-inv-3', author: 'agent', timestamp: at(),
    content: { role: 'model', parts: [{ text: 'after' }] },
  }));
}

async function read(sessionId) {
  const s = await svc.getSession({ appName, userId, sessionId });
  if (!s) {
    throw new Error(`ADK JS: no session ${sessionId}`);
  }
  return {
    session: s,
    compacted: s.events.map(isCompactedEvent),
    scratchpad: s.events.map(isScratchpadEvent),
    active: getActiveEvents(s.events).map((e) => e.id),
  };
}

const out = {};
if (writeId) {
  await write(writeId);
  out.written = await read(writeId);
}
out.read = await read(readId);
console.log(JSON.stringify(out));
process.exit(0); // the ORM's pool keeps the process alive otherwise
