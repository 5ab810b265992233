// Audio for the Speech card, on the main thread: a file as the worker should get it, the
// microphone's samples while it records (with a level meter), and the call that transcribes them.
// The worker does the rest (engine/tasks/speech_recognition.py, transcribe_audio):
// - a WAV file goes as its own bytes, read there by the engine's WAV reader, so the transcript is
//   the one `python -m engine transcribe` gives for the same file;
// - anything else the browser decodes (decodeAudioData: MP3, Ogg, FLAC, AAC, ...) and the
//   microphone go as mono float32 samples with their sample rate, resampled to 16 kHz there.
// Loaded by the card's <script type="module">; the card's MicroPython reaches it as
// window.audioCapture.

const DECODE_RATE = 48000;                 // decodeAudioData resamples to its context's rate: a common native one
const CHUNK_FRAMES = 4096;                 // the worklet posts this many frames at a time (~85 ms at 48 kHz)
const DICTATION_RATE = 16000;              // live dictation records at Whisper's rate: the browser resamples
const DICTATION_CHUNK = 1024;              // 64 ms at 16 kHz: an utterance's end reaches the worker soon
const MAX_SECONDS = 60 * 60;               // a recording stops by itself after an hour (~700 MB of float32 at 48 kHz)

// "RIFF" or "RF64" ... "WAVE": the engine reads it (and says precisely what is wrong with a bad one)
function isWav(buffer) {
  if (buffer.byteLength < 12) return false;
  const text = String.fromCharCode(...new Uint8Array(buffer, 0, 12));
  return (text.startsWith("RIFF") || text.startsWith("RF64")) && text.slice(8, 12) === "WAVE";
}

function mono(audioBuffer) {
  const n = audioBuffer.numberOfChannels;
  if (n === 1) return audioBuffer.getChannelData(0).slice();
  const out = new Float32Array(audioBuffer.length);
  for (let c = 0; c < n; c++) {
    const channel = audioBuffer.getChannelData(c);
    for (let i = 0; i < out.length; i++) out[i] += channel[i] / n;
  }
  return out;
}

// A chosen or dropped file (or a fetched Blob and its name) -> {kind: "wav", bytes, name} or
// {kind: "pcm", samples, rate, name}. Rejects, naming the file, when it is empty or the browser
// cannot decode it as audio.
async function readFile(file, name = file.name || "the file") {
  if (!file.size) throw new Error(`${name}: the file is empty`);
  const buffer = await file.arrayBuffer();
  if (isWav(buffer)) return { kind: "wav", bytes: new Uint8Array(buffer), name, file };
  const context = new OfflineAudioContext(1, 1, DECODE_RATE);
  let decoded;
  try {
    decoded = await context.decodeAudioData(buffer);
  } catch {
    throw new Error(`${name}: this browser cannot decode the file as audio (a WAV, MP3, Ogg, FLAC or AAC file is expected)`);
  }
  if (!decoded.length) throw new Error(`${name}: the file holds no audio`);
  return { kind: "pcm", samples: mono(decoded), rate: decoded.sampleRate, name, file };
}

// 16-bit PCM WAV bytes of float32 mono samples at `rate`.
function wavBytes(samples, rate) {
  const out = new DataView(new ArrayBuffer(44 + samples.length * 2));
  const text = (at, s) => { for (let i = 0; i < s.length; i++) out.setUint8(at + i, s.charCodeAt(i)); };
  text(0, "RIFF"); out.setUint32(4, 36 + samples.length * 2, true); text(8, "WAVE");
  text(12, "fmt "); out.setUint32(16, 16, true); out.setUint16(20, 1, true); out.setUint16(22, 1, true);
  out.setUint32(24, rate, true); out.setUint32(28, rate * 2, true); out.setUint16(32, 2, true);
  out.setUint16(34, 16, true); text(36, "data"); out.setUint32(40, samples.length * 2, true);
  for (let i = 0; i < samples.length; i++) {
    out.setInt16(44 + 2 * i, Math.round(Math.max(-1, Math.min(1, samples[i])) * 32767), true);
  }
  return new Uint8Array(out.buffer);
}

// A URL the <audio> element plays: the file as chosen, or the recording as a WAV.
function playable(audio) {
  const blob = audio.file || (audio.kind === "wav" ? new Blob([audio.bytes], { type: "audio/wav" })
    : new Blob([wavBytes(audio.samples, audio.rate)], { type: "audio/wav" }));
  return URL.createObjectURL(blob);
}

// While `player` plays, the word spans (.word, data-start and data-end in seconds) under
// `container` are marked: "current" the one being spoken, "spoken" those before it. Each animation
// frame and each timeupdate looks at the player's time. Returns a function that stops it.
function highlightWords(player, container) {
  let words = [];
  let frame = null;
  const mark = () => {
    const t = player.currentTime;
    for (const w of words) {
      w.el.classList.toggle("current", w.start <= t && t < w.end);
      w.el.classList.toggle("spoken", w.end <= t);
    }
  };
  const loop = () => { mark(); frame = player.paused ? null : requestAnimationFrame(loop); };
  const onPlay = () => {
    words = [...container.querySelectorAll(".word")].map((el) =>
      ({ el, start: Number(el.dataset.start), end: Number(el.dataset.end) }));
    if (frame === null) frame = requestAnimationFrame(loop);
  };
  player.addEventListener("play", onPlay);
  player.addEventListener("timeupdate", mark);
  player.addEventListener("seeked", mark);
  return () => {
    player.removeEventListener("play", onPlay);
    player.removeEventListener("timeupdate", mark);
    player.removeEventListener("seeked", mark);
    if (frame !== null) cancelAnimationFrame(frame);
  };
}

// The worklet that hands the microphone's samples (downmixed to mono) to the page in chunks of
// `frames`.
const WORKLET = (frames) => `
class Capture extends AudioWorkletProcessor {
  constructor() { super(); this.chunk = new Float32Array(${frames}); this.filled = 0; }
  process(inputs) {
    const channels = inputs[0];
    if (!channels || !channels.length) return true;
    const frames = channels[0].length;
    for (let i = 0; i < frames; i++) {
      let sum = 0;
      for (const channel of channels) sum += channel[i];
      this.chunk[this.filled++] = sum / channels.length;
      if (this.filled === this.chunk.length) {
        this.port.postMessage(this.chunk, [this.chunk.buffer]);
        this.chunk = new Float32Array(${frames});
        this.filled = 0;
      }
    }
    return true;
  }
}
registerProcessor("speech-capture", Capture);
`;

// The microphone, recording until stop(). `meter`: a <meter> (0-1) showing the level, with the
// highest level so far in its data-peak; `clock`: an element showing the seconds recorded.
// `rate`: the sample rate to record at (the AudioContext's; default the device's own);
// `onChunk(samples)`: called with each chunk as it comes.
class Recorder {
  constructor(meter, clock, { rate = null, frames = CHUNK_FRAMES, onChunk = null } = {}) {
    this.meter = meter;
    this.clock = clock;
    this.wantedRate = rate;
    this.framesPerChunk = frames;
    this.onChunk = onChunk;
    this.chunks = [];
    this.frames = 0;
    this.peak = 0;
    this.stopped = null;
  }

  async start() {
    if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      throw new Error("this browser gives no access to a microphone here (it needs https or localhost)");
    }
    try {
      this.stream = await navigator.mediaDevices.getUserMedia({
        audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
      });
    } catch (err) {
      const why = err && err.name === "NotAllowedError" ? "permission was denied"
        : err && err.name === "NotFoundError" ? "no microphone was found" : (err && err.message) || String(err);
      throw new Error(`the microphone could not be opened: ${why}`);
    }
    this.context = this.wantedRate ? new AudioContext({ sampleRate: this.wantedRate }) : new AudioContext();
    await this.context.resume();
    this.rate = this.context.sampleRate;
    const source = this.context.createMediaStreamSource(this.stream);
    const url = URL.createObjectURL(new Blob([WORKLET(this.framesPerChunk)], { type: "text/javascript" }));
    try {
      await this.context.audioWorklet.addModule(url);
    } finally {
      URL.revokeObjectURL(url);
    }
    this.node = new AudioWorkletNode(this.context, "speech-capture", { numberOfOutputs: 1 });
    this.node.port.onmessage = (event) => this.take(event.data);
    const silent = this.context.createGain();         // a node is processed while it leads to the output
    silent.gain.value = 0;
    source.connect(this.node).connect(silent).connect(this.context.destination);
    this.source = source;
  }

  take(chunk) {
    if (this.stopped) return;
    this.chunks.push(chunk);
    this.frames += chunk.length;
    let sum = 0;
    for (let i = 0; i < chunk.length; i++) sum += chunk[i] * chunk[i];
    const rms = Math.sqrt(sum / chunk.length);
    const level = Math.min(1, Math.max(0, (20 * Math.log10(rms + 1e-9) + 60) / 60));    // -60 dBFS .. 0 dBFS
    this.peak = Math.max(this.peak, level);
    if (this.meter) {
      this.meter.value = level;
      this.meter.dataset.peak = this.peak.toFixed(3);
    }
    if (this.clock) this.clock.textContent = `${(this.frames / this.rate).toFixed(1)} s`;
    if (this.onChunk) this.onChunk(chunk);
    if (this.frames >= MAX_SECONDS * this.rate) this.stop();
  }

  // The recording so far as {kind: "pcm", samples, rate, name}; the microphone is released.
  async stop() {
    if (!this.stopped) {
      this.stopped = (async () => {
        if (this.source) this.source.disconnect();
        if (this.node) this.node.port.onmessage = null;
        if (this.stream) for (const track of this.stream.getTracks()) track.stop();
        if (this.context) await this.context.close();
        if (this.meter) this.meter.value = 0;
      })();
    }
    await this.stopped;
    return this.snapshot();
  }

  // The recording so far as {kind: "pcm", samples, rate, name} (it goes on recording).
  snapshot() {
    const samples = new Float32Array(this.frames);
    let at = 0;
    for (const chunk of this.chunks) { samples.set(chunk, at); at += chunk.length; }
    return { kind: "pcm", samples, rate: this.rate, name: "the recording" };
  }

  get seconds() { return this.rate ? this.frames / this.rate : 0; }
}

// The seconds of audio in what readFile or Recorder.stop gave (0 for a WAV: the worker reads it).
function duration(audio) {
  return audio.kind === "pcm" ? audio.samples.length / audio.rate : 0;
}

// Transcribe in the worker: onSegment(json) for each segment as it is decoded; the promise gives
// the worker's {text, language, segments, seconds, duration, rtf, device, ...}. `options`: a JSON
// string ({task, language, vad}); the audio's name goes with it, for the worker's errors. The audio is
// copied, not transferred, so it can be transcribed again.
function transcribe(client, audio, options, onSegment) {
  const withName = JSON.stringify({ ...JSON.parse(options || "{}"), name: audio.name });
  const args = audio.kind === "wav" ? [audio.bytes, 0, withName] : [audio.samples, audio.rate, withName];
  return client.call("transcribe_audio", { args, stream: true }, [], onSegment);
}

function concat(chunks) {
  const out = new Float32Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const chunk of chunks) { out.set(chunk, at); at += chunk.length; }
  return out;
}

// Live dictation (engine/tasks/speech_recognition.py, dictation_*): the microphone at 16 kHz, its
// samples fed to the worker as they come, one call in flight and the samples that come meanwhile
// gathered for the next. onEvents(reply, recordedSeconds) gets each reply's events (an utterance's
// text as soon as a pause ends it, a pack's final text) and how much had been recorded when it came.
class Dictation {
  constructor(client, onEvents) {
    this.client = client;
    this.onEvents = onEvents;
    this.pending = [];
    this.busy = null;
    this.error = null;
  }

  async start(meter, clock, options) {
    await this.client.call("dictation_start", { args: [options] });
    this.recorder = new Recorder(meter, clock, {
      rate: DICTATION_RATE, frames: DICTATION_CHUNK, onChunk: (chunk) => { this.pending.push(chunk); this.pump(); },
    });
    try {
      await this.recorder.start();
    } catch (err) {
      await this.recorder.stop().catch(() => {});
      throw err;
    }
    if (this.recorder.rate !== DICTATION_RATE) {
      await this.recorder.stop();
      throw new Error(`this browser records at ${this.recorder.rate} Hz, not ${DICTATION_RATE} Hz`);
    }
    return this;
  }

  pump() {
    if (this.busy || !this.pending.length || this.error) return;
    const samples = concat(this.pending);
    this.pending = [];
    this.busy = this.client.call("dictation_feed", { args: [samples] })
      .then((reply) => this.onEvents(reply, this.recorder.seconds))
      .catch((err) => { this.error = err; })
      .finally(() => { this.busy = null; this.pump(); });
  }

  get seconds() { return this.recorder ? this.recorder.seconds : 0; }

  // Stop recording, feed what is left, and end: the worker's final transcript ({text, segments,
  // language, speech, events}) and the recording ({kind: "pcm", samples, rate: 16000, name}).
  async finish() {
    const audio = await this.recorder.stop();
    while (this.busy || (this.pending.length && !this.error)) {
      this.pump();
      await this.busy;
    }
    if (this.error) throw this.error;
    const reply = await this.client.call("dictation_finish", { args: [] });
    this.onEvents(reply, this.recorder.seconds);
    window.audioCapture.lastRecording = audio;        // what the final transcript is of
    return { reply, audio };
  }
}

async function dictate(client, meter, clock, options, onEvents) {
  return new Dictation(client, onEvents).start(meter, clock, options);
}

window.audioCapture = { readFile, duration, transcribe, isWav, dictate, playable, highlightWords };
export { readFile, duration, transcribe, isWav, Recorder, dictate, playable, highlightWords };
