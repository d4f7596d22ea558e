// ADK JS 2.0.0's own getActiveEvents on events as adksession stores them,
// for integration/adkjs_view_test.go (TestADKJSCompactedViewProperty):
//
//   node active.mjs CASES_JSON_FILE
//
// The file holds an array of cases, each an object of named event lists
// (a history, its compacted view, ...), each event the text of its
// events.event_data column as adksession writes it. Every event is read as
// ADK JS's DatabaseSessionService reads that column (its JSON column type:
// transformToCamelCaseEvent of the parsed JSON), and getActiveEvents runs
// on each list as ContentRequestProcessor runs it on session.events (the
// events in timestamp order, as getSession reads them). Prints one JSON
// array: for each case, an object of the same names, each the active
// events as ADK JS has them.
import { readFileSync } from 'node:fs';
import { transformToCamelCaseEvent } from './node_modules/@google/adk/dist/esm/events/event.js';
import { getActiveEvents } from './node_modules/@google/adk/dist/esm/context/compaction_utils.js';

const [file] = process.argv.slice(2);
if (!file) {
  console.error('usage: node active.mjs CASES_JSON_FILE');
  process.exit(2);
}

const cases = JSON.parse(readFileSync(file, 'utf8'));
const out = cases.map((c) => {
  const active = {};
  for (const [name, rows] of Object.entries(c)) {
    active[name] = getActiveEvents(rows.map((data) => transformToCamelCaseEvent(JSON.parse(data))));
  }
  return active;
});
console.log(JSON.stringify(out));
