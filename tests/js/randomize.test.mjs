// Unit tests of the JavaScript randomizer (node --test tests/js/); the statistical tests and the
// comparison with the Python randomizers are driven from tests/unit/test_local_js.py.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ByteStream,
  bernoulliExp,
  configHash,
  makeRandomizer,
  parseEpsilon,
  randomize,
  uniform,
  VERSION,
} from "../../dprelease/local/randomize.js";

/** A configuration sealed as `dprelease local wave` seals it. */
async function sealed(config) {
  const whole = { version: VERSION, ...config };
  return { ...whole, wave_hash: await configHash(whole) };
}

function bytesOf(list) {
  let position = 0;
  return (n) => {
    const out = new Uint8Array(n);
    for (let i = 0; i < n; i++) out[i] = position < list.length ? list[position++] : 0;
    return out;
  };
}

test("epsilon is read exactly, in lowest terms", () => {
  assert.deepEqual(parseEpsilon("1"), { num: 1n, den: 1n });
  assert.deepEqual(parseEpsilon("0.50"), { num: 1n, den: 2n });
  assert.deepEqual(parseEpsilon("2/6"), { num: 1n, den: 3n });
  assert.deepEqual(parseEpsilon(0.25), { num: 1n, den: 4n });
  for (const bad of ["0", "-1", "abc", "", "1/0", "."]) {
    assert.throws(() => parseEpsilon(bad), RangeError, bad);
  }
});

test("uniform reads the documented bytes: low bits, little-endian, rejected from m up", () => {
  // m = 6: 3 bits a byte; 0xff -> 7 is rejected, 0x05 -> 5 is kept
  assert.equal(uniform(new ByteStream(bytesOf([0xff, 0x05])), 6n), 5n);
  // m = 1000: 10 bits of 2 bytes; [0xe8, 0x03] -> 1000 is rejected, [0x01, 0x00] -> 1
  assert.equal(uniform(new ByteStream(bytesOf([0xe8, 0x03, 0x01, 0x00])), 1000n), 1n);
  // m = 1 reads nothing
  const stream = new ByteStream(bytesOf([9]));
  assert.equal(uniform(stream, 1n), 0n);
  assert.equal(uniform(stream, 256n), 9n);
});

test("Bernoulli(exp(-0)) is always true and reads nothing", () => {
  const stream = new ByteStream(bytesOf([]));
  for (let i = 0; i < 10; i++) assert.equal(bernoulliExp(stream, { num: 0n, den: 1n }), true);
});

test("the frequency of Bernoulli(exp(-1/2)) is close to its probability", () => {
  const stream = new ByteStream();
  let ones = 0;
  const n = 40000;
  for (let i = 0; i < n; i++) ones += bernoulliExp(stream, { num: 1n, den: 2n }) ? 1 : 0;
  const p = Math.exp(-0.5);
  const sd = Math.sqrt(p * (1 - p) / n);
  assert.ok(Math.abs(ones / n - p) < 5 * sd, `${ones / n} vs ${p}`); // false alarm ~6e-7
});

test("reports have each protocol's form", async () => {
  const domain = ["never", "once", "monthly", "weekly"];
  const krr = await randomize("once", await sealed({ mechanism: "krr", epsilon: "1", domain }));
  assert.ok(domain.includes(krr));
  const oue = await randomize("once", await sealed({ mechanism: "oue", epsilon: "1", domain }));
  assert.match(oue, /^[01]{4}$/);
  const olh = await randomize("once", await sealed({ mechanism: "olh", epsilon: "1", domain, g: 4 }));
  const [a, b, y] = olh.split(":").map(BigInt);
  assert.ok(a >= 1n && a < 2147483647n && b >= 0n && b < 2147483647n && y >= 0n && y < 4n);
});

test("an answer is matched with its type: 1 is not true, nor '1'", async () => {
  const randomizer = await makeRandomizer(await sealed({ mechanism: "krr", epsilon: "1", domain: [1, 2] }));
  assert.throws(() => randomizer.randomize(true), /not in the domain/);
  assert.throws(() => randomizer.randomize("1"), /not in the domain/);
  assert.ok([1, 2].includes(randomizer.randomize(1)));
});

test("a bad configuration is refused before any answer", async () => {
  const domain = ["a", "b"];
  const bad = [
    { mechanism: "rappor", epsilon: "1", domain },
    { mechanism: "krr", epsilon: "1", domain: ["a"] },
    { mechanism: "krr", epsilon: "1", domain: ["a", "a"] },
    { mechanism: "krr", epsilon: "1", domain, g: 3 },
    { mechanism: "olh", epsilon: "1", domain },
    { mechanism: "olh", epsilon: "1", domain, g: 1 },
    { mechanism: "krr", epsilon: "0", domain },
  ];
  for (const config of bad) {
    await assert.rejects(makeRandomizer(await sealed(config)), RangeError, JSON.stringify(config));
  }
  const good = await sealed({ mechanism: "krr", epsilon: "1", domain, wave: "w" });
  assert.equal((await makeRandomizer(good)).config.version, VERSION);
  await assert.rejects(makeRandomizer({ ...good, version: "dprelease-local/0" }), /this module is/);
});

test("a configuration without its seal, or not the one its seal is of, is refused", async () => {
  const good = await sealed({ mechanism: "krr", epsilon: "1/2", domain: [0, 1], wave: "w" });
  const { wave_hash: _, ...unsealed } = good;
  await assert.rejects(makeRandomizer(unsealed), /no wave_hash/);
  const { version: __, ...unversioned } = good;
  await assert.rejects(makeRandomizer(unversioned), /this module is/);
  for (const edit of [{ epsilon: "1" }, { epsilon: "0.5" }, { domain: [1, 0] }, { wave: "v" }]) {
    await assert.rejects(makeRandomizer({ ...good, ...edit }), /not the one its wave_hash seals/);
  }
  const reordered = Object.fromEntries(Object.entries(good).reverse());
  assert.ok((await makeRandomizer(reordered)).randomize(0) !== undefined); // key order is free
});

test("the same bytes give the same reports", async () => {
  const config = await sealed({ mechanism: "olh", epsilon: "5/2", domain: [0, 1, 2, 3, 4], g: 13 });
  const bytes = Array.from({ length: 4096 }, (_, i) => (i * 2654435761) % 251);
  const first = await makeRandomizer(config, { bytes: bytesOf(bytes) });
  const second = await makeRandomizer(config, { bytes: bytesOf(bytes) });
  const answers = [0, 1, 2, 3, 4, 0, 1];
  assert.deepEqual(answers.map(first.randomize), answers.map(second.randomize));
});
