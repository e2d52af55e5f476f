// Drives dprelease/local/randomize.js for the Python tests: reads one JSON job on stdin and
// writes {"reports": [...]} on stdout.
//   {"config": {...}, "answers": [...], "bytes": "hex"}  the answers' reports, in order, drawn
//                                                        from exactly these bytes
//   {"config": {...}, "answers": [...]}                  the same from crypto.getRandomValues
//   {"version": true}                                    {"version": VERSION}
//   {"hash": {...}}                                      {"hash": configHash(...)}
import { readFileSync } from "node:fs";
import { configHash, makeRandomizer, VERSION } from "../../dprelease/local/randomize.js";

const job = JSON.parse(readFileSync(0, "utf8"));

/** A reader of the given bytes, then zeros (the stream reads ahead in blocks; the Python side
 *  pads the same way, and a test gives more bytes than its draws use). */
function fixedBytes(hex) {
  const all = Buffer.from(hex, "hex");
  let position = 0;
  return (n) => {
    const end = Math.min(position + n, all.length);
    const out = new Uint8Array(n);
    out.set(all.subarray(position, end));
    position += n;
    return out;
  };
}

if (job.version) {
  process.stdout.write(JSON.stringify({ version: VERSION }));
} else if (job.hash) {
  process.stdout.write(JSON.stringify({ hash: await configHash(job.hash) }));
} else {
  const options = job.bytes === undefined ? {} : { bytes: fixedBytes(job.bytes) };
  const randomizer = await makeRandomizer(job.config, options);
  process.stdout.write(JSON.stringify({ reports: job.answers.map((a) => randomizer.randomize(a)) }));
}
