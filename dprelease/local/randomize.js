// dprelease local randomizer: a dependency-free ES module for web questionnaires.
//
// It randomizes one answer on the respondent's device, before anything is sent, so the agency
// never holds the true answer (ε-local differential privacy). It runs the algorithms of the
// Python library (dprelease/local/_exact.py) exactly, reading random bytes from
// crypto.getRandomValues in the same order: fed the same bytes, both give the same report.
//
//   import { makeRandomizer } from "./randomize.js";
//   const config = {...};          // exactly as `dprelease local wave` prints it, wave_hash included
//   const randomizer = await makeRandomizer(config);  // refuses a config that is not the wave's
//   const report = randomizer.randomize("monthly");   // send `report` and config.wave_hash,
//                                                     // never the answer
//
// The configuration is sealed: `wave_hash` is SHA-256 of its canonical JSON (every other key,
// sorted, no spaces, UTF-8), recomputed here with crypto.subtle, so a page configured otherwise
// than the recorded wave (another ε, a stale snippet) randomizes nothing; the release refuses
// reports that do not carry the wave's hash.
//
// Protocols (Wang, Blocki, Li & Jha 2017), every probability sampled exactly, never by comparing
// a float:
//   krr  k-ary randomized response: the answer with probability e^ε/(e^ε + k − 1), else another
//        answer uniformly. Report: an answer of the domain.
//   oue  optimized unary encoding: the answer's bit is 1 with probability 1/2, every other bit
//        with probability 1/(1 + e^ε). Report: k characters "0"/"1".
//   olh  optimized local hashing: h(x) = ((a·x + b) mod P) mod g, P = 2^31 − 1, a uniform in
//        [1, P), b in [0, P); the bucket h(index) by g-ary randomized response. Report: "a:b:y".
//
// Exact draws (all integers, BigInt):
//   uniform(m)   the low L bits of ceil(L/8) little-endian bytes (L = bit length of m − 1),
//                drawn again while they are m or more
//   Bernoulli(e^−γ), γ = num/den ≥ 0 (Canonne, Kamath & Steinke 2020, Algorithm 1): for γ ≤ 1,
//                A_k = [uniform(den·k) < num] for k = 1, 2, … until the first A_k = 0, at K;
//                answer [K odd]. γ > 1: ⌊γ⌋ draws at γ = 1, then one at γ − ⌊γ⌋, all true.
//   k-RR         propose u = uniform(k); answer u if u is the answer, else answer u with
//                probability e^−ε, else propose again.
//   1/(1 + e^ε)  a fair bit: 1 → answer 0; 0 → if Bernoulli(e^−ε) answer 1, else draw again.

export const VERSION = "dprelease-local/1";
export const PRIME = 2147483647n;
const MECHANISMS = ["krr", "oue", "olh"];
const MAX_DOMAIN = 65536;

/** Fresh random bytes from the platform's CSPRNG (browsers and Node ≥ 19). */
export function cryptoBytes(n) {
  const out = new Uint8Array(n);
  for (let start = 0; start < n; start += 65536) {
    globalThis.crypto.getRandomValues(out.subarray(start, Math.min(n, start + 65536)));
  }
  return out;
}

/** Bytes served in order from `read(n)` (which returns n fresh bytes), read in blocks. */
export class ByteStream {
  constructor(read = cryptoBytes, block = 4096) {
    this.read = read;
    this.block = block;
    this.buffer = new Uint8Array(0);
    this.position = 0;
  }

  take(n) {
    if (this.position + n > this.buffer.length) {
      const rest = this.buffer.subarray(this.position);
      const fresh = this.read(Math.max(this.block, n - rest.length));
      const joined = new Uint8Array(rest.length + fresh.length);
      joined.set(rest);
      joined.set(fresh, rest.length);
      this.buffer = joined;
      this.position = 0;
    }
    const out = this.buffer.subarray(this.position, this.position + n);
    this.position += n;
    return out;
  }
}

function bitLength(x) {
  return x === 0n ? 0 : x.toString(2).length;
}

/** A BigInt uniform in [0, m), m ≥ 1 (m = 1 reads nothing). */
export function uniform(stream, m) {
  if (m < 1n) throw new RangeError(`uniform needs m >= 1, got ${m}`);
  const bits = bitLength(m - 1n);
  if (bits === 0) return 0n;
  const nbytes = Math.ceil(bits / 8);
  const mask = (1n << BigInt(bits)) - 1n;
  for (;;) {
    const bytes = stream.take(nbytes);
    let word = 0n;
    for (let i = nbytes - 1; i >= 0; i--) word = (word << 8n) | BigInt(bytes[i]);
    word &= mask;
    if (word < m) return word;
  }
}

function bernoulli(stream, num, den) {
  return uniform(stream, den) < num;
}

function bernoulliExpAtMostOne(stream, num, den) {
  let k = 1n;
  while (bernoulli(stream, num, den * k)) k += 1n;
  return k % 2n === 1n;
}

/** True with probability e^(−γ), γ = {num, den} in lowest terms, γ ≥ 0. */
export function bernoulliExp(stream, gamma) {
  const whole = gamma.num / gamma.den;
  const rest = gamma.num % gamma.den;
  for (let i = 0n; i < whole; i++) {
    if (!bernoulliExpAtMostOne(stream, 1n, 1n)) return false;
  }
  return bernoulliExpAtMostOne(stream, rest, gamma.den);
}

function keepOrOther(stream, value, k, gamma) {
  for (;;) {
    const proposal = uniform(stream, k);
    if (proposal === value || bernoulliExp(stream, gamma)) return proposal;
  }
}

function bernoulliOneOverOnePlusExp(stream, gamma) {
  for (;;) {
    if (uniform(stream, 2n) === 1n) return false;
    if (bernoulliExp(stream, gamma)) return true;
  }
}

function gcd(a, b) {
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
}

/** ε as an exact fraction {num, den} in lowest terms: "1", "0.25", "1/3" (or a number). */
export function parseEpsilon(epsilon) {
  const text = String(epsilon).trim();
  let num;
  let den;
  let match = /^(\d+)\/(\d+)$/.exec(text);
  if (match) {
    num = BigInt(match[1]);
    den = BigInt(match[2]);
  } else if ((match = /^(\d*)(?:\.(\d*))?$/.exec(text)) && text !== "" && text !== ".") {
    const decimals = match[2] || "";
    num = BigInt((match[1] || "0") + decimals);
    den = 10n ** BigInt(decimals.length);
  } else {
    throw new RangeError(`epsilon must be a number > 0 such as 1, 0.5 or 1/3, got ${epsilon}`);
  }
  if (num === 0n || den === 0n) throw new RangeError(`epsilon must be > 0, got ${epsilon}`);
  const d = gcd(num, den);
  return { num: num / d, den: den / d };
}

/** The canonical JSON of a configuration (keys sorted at every level, no spaces), as Python's
 *  json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False) writes it. */
export function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value).sort();
    return `{${keys.map((key) => `${JSON.stringify(key)}:${canonical(value[key])}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

/** SHA-256 (hex) of the configuration's canonical JSON, every key but wave_hash. */
export async function configHash(config) {
  const facts = Object.fromEntries(Object.entries(config).filter(([key]) => key !== "wave_hash"));
  const digest = await globalThis.crypto.subtle.digest(
    "SHA-256",
    new TextEncoder().encode(canonical(facts)),
  );
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

function checkConfig(config) {
  if (config.version !== VERSION) {
    throw new RangeError(`this module is ${VERSION}; the configuration says ${config.version}`);
  }
  if (typeof config.wave_hash !== "string") {
    throw new RangeError("the configuration has no wave_hash: use it as `dprelease local wave` prints it");
  }
  if (!MECHANISMS.includes(config.mechanism)) {
    throw new RangeError(`mechanism must be one of ${MECHANISMS.join(", ")}`);
  }
  const domain = config.domain;
  if (!Array.isArray(domain) || domain.length < 2 || domain.length > MAX_DOMAIN) {
    throw new RangeError(`the domain needs 2 to ${MAX_DOMAIN} answers`);
  }
  if (new Set(domain.map((a) => `${typeof a}:${a}`)).size !== domain.length) {
    throw new RangeError("the domain lists an answer twice");
  }
  if ((config.mechanism === "olh") !== (config.g !== undefined && config.g !== null)) {
    throw new RangeError("g (the number of buckets) is given for olh, and only for olh");
  }
  if (config.g !== undefined && config.g !== null) {
    if (!Number.isInteger(config.g) || config.g < 2 || BigInt(config.g) >= PRIME) {
      throw new RangeError(`g must be an integer, at least 2 and below ${PRIME}`);
    }
  }
}

/**
 * A randomizer for one wave's configuration, exactly as `dprelease local wave` prints it: call
 * `.randomize(answer)` for each answer; `bytes(n)` (default crypto.getRandomValues) is where
 * the random bytes come from. Refused (RangeError) before any answer: a configuration without
 * its version or wave_hash, or whose wave_hash is not its own (it was edited).
 */
export async function makeRandomizer(config, { bytes = cryptoBytes } = {}) {
  checkConfig(config);
  if ((await configHash(config)) !== config.wave_hash) {
    throw new RangeError(
      "the configuration is not the one its wave_hash seals (edited?): use it as `dprelease local wave` prints it",
    );
  }
  const gamma = parseEpsilon(config.epsilon);
  const domain = config.domain;
  const k = BigInt(domain.length);
  const stream = new ByteStream(bytes);
  function index(answer) {
    const position = domain.findIndex((a) => a === answer);
    if (position < 0) throw new RangeError(`answer ${JSON.stringify(answer)} is not in the domain`);
    return BigInt(position);
  }
  function randomize(answer) {
    const value = index(answer);
    if (config.mechanism === "krr") {
      return domain[Number(keepOrOther(stream, value, k, gamma))];
    }
    if (config.mechanism === "oue") {
      let bits = "";
      for (let j = 0n; j < k; j++) {
        if (j === value) bits += uniform(stream, 2n) === 1n ? "1" : "0";
        else bits += bernoulliOneOverOnePlusExp(stream, gamma) ? "1" : "0";
      }
      return bits;
    }
    const g = BigInt(config.g);
    const a = 1n + uniform(stream, PRIME - 1n);
    const b = uniform(stream, PRIME);
    const bucket = keepOrOther(stream, ((a * value + b) % PRIME) % g, g, gamma);
    return `${a}:${b}:${bucket}`;
  }
  return { config, randomize };
}

/** The report of one answer under `config` (a fresh randomizer: bytes from crypto). */
export async function randomize(answer, config, options = {}) {
  return (await makeRandomizer(config, options)).randomize(answer);
}
