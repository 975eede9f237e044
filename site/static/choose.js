// memlab Choose page: evaluates the committed memory models (embedded in the form's data-app attribute
// as JSON) in the browser, as `memlab advise` does in Python: bytes as BigInt (exact), the relative
// step time in the same float operations and order, rounded as Python's round() does.  See
// NOTE [ the Choose page agrees with memlab advise ] in memlab/site/choose.py: change both together.
// Inputs live in the URL's hash (#family=chunking&n=...&budget=2GiB), so a link reopens an answer.
"use strict";

var memlabChoose = (function () {
  var APP = null;
  var MiB = 1048576;
  var SHOWN = 15;   // rows of the fits table shown before "Show all"

  // -- Python-compatible numbers -------------------------------------------------------------------
  // An exact tie at nd decimals is x = j / 2^(nd+1) with j odd (x * 10^nd = j * 5^nd / 2): Python rounds
  // it half to even; toFixed rounds it up.  Everything else toFixed rounds as Python does (exact value).
  function tieEven(x, nd) {
    var y = Math.abs(x) * Math.pow(2, nd + 1);
    if (!Number.isInteger(y) || y % 2 !== 1 || !Number.isSafeInteger(y)) { return null; }
    var num = BigInt(y) * (5n ** BigInt(nd));            // odd: x * 10^nd = num / 2
    var lo = (num - 1n) / 2n;
    return lo % 2n === 0n ? lo : lo + 1n;                   // the even neighbour, in units of 10^-nd
  }

  function pyFixed(x, nd) {   // f"{x:.{nd}f}"
    var even = tieEven(x, nd);
    if (even === null) { return x.toFixed(nd); }
    var s = even.toString().padStart(nd + 1, "0");
    var text = nd ? s.slice(0, s.length - nd) + "." + s.slice(s.length - nd) : s;
    return (x < 0 ? "-" : "") + text;
  }

  function pyRound(x, nd) {   // round(x, nd) -> float
    return Number(pyFixed(x, nd));
  }

  function fmtMiB(bytes) {    // memlab.site.text.fmt_mib
    return bytes === null || bytes === undefined ? "-" : pyFixed(Number(bytes) / MiB, 1) + " MiB";
  }

  function fmtRel(t) {        // memlab.site.text.fmt_relative
    return t === null || t === undefined ? "-" : pyFixed(t, 2) + "×";
  }

  function cmpBig(a, b) { return a < b ? -1 : (a > b ? 1 : 0); }

  function fmtBytes(big) {    // memlab.advisor.advise.fmt_bytes (a power of two divides a double exactly)
    var n = Number(big < 0n ? -big : big), sign = big < 0n ? "-" : "";
    if (n >= 1024 * MiB) { return sign + pyFixed(n / (1024 * MiB), 2) + " GiB"; }
    if (n >= MiB) { return sign + pyFixed(n / MiB, 1) + " MiB"; }
    return sign + (n >= 1024 ? pyFixed(n / 1024, 1) + " KiB" : pyFixed(n, 0) + " B");
  }

  // -- the decision (memlab.advisor.decision: NOTE [ plain fits first ]) ----------------------------
  function tieKey(a, b) {      // decision._tie_key: ranked times first, then by time, then by need
    var na = !a.time_ranked || a.relative_step_time === null, nb = !b.time_ranked || b.relative_step_time === null;
    return (na - nb) || ((a.relative_step_time || 0) - (b.relative_step_time || 0)) || cmpBig(a.need_bytes, b.need_bytes);
  }

  function tied(t, lead, error) {
    return t !== null && lead !== null && Math.abs(t - lead) <= (error || 0) * Math.max(t, lead);
  }

  function orderFits(fits, error) {          // decision.order_fits
    var ranked = function (c) { return c.time_ranked ? c.relative_step_time : null; };
    var plain = fits.filter(function (c) { return c.baseline; }).slice(0, 1);
    var rest = fits.filter(function (c) { return plain.indexOf(c) < 0; }).sort(tieKey);
    var withPlain = rest.filter(function (c) { return plain.length > 0 && tied(ranked(c), 1.0, error); });
    var out = plain.concat(withPlain);   // ranks set on the candidates themselves (the Pareto table shares them)
    out.forEach(function (c) { c.rank = 1; });
    var group = [], lead = null;
    rest.filter(function (c) { return withPlain.indexOf(c) < 0; }).forEach(function (c) {
      var t = ranked(c);
      if (!tied(t, lead, error)) {
        out = out.concat(group);
        group = [];
        lead = t;
      }
      c.rank = t === null ? null : out.length + 1;
      group.push(c);
    });
    return out.concat(group);
  }

  function pyValue(v) {        // str() of a JSON value as Python prints it (True, False, None)
    return v === true ? "True" : v === false ? "False" : v === null ? "None" : String(v);
  }

  function timesText(t) { return t === null ? "time not predicted:" : "about " + pyFixed(t, 2) + "x"; }

  function trusted(c) {        // decision._trusted: ranked, and no more chunks than its time model measured
    return c.time_ranked && (c.chunks_timed === null || c.chunks_timed === undefined);
  }

  function plainVerdict(candidates, fits, budget, error, need, larger) {   // decision.plain_verdict
    var plain = candidates.filter(function (c) { return c.baseline; })[0];
    if (!plain) { return null; }
    var first = fits.length ? fits[0] : null;
    if (plain.need_bytes > budget || !plain.recommendable) {
      return {plain_fits: false, label: plain.label, need_bytes: plain.need_bytes, buys: null,
              text: "plain (" + plain.label + ") does not fit: " + need + " " + fmtBytes(plain.need_bytes) + " of "
                + fmtBytes(budget) + (first ? "; first choice: " + labelText(first) + ", " + need + " "
                + fmtBytes(first.need_bytes) + ", " + timesText(first.relative_step_time) + " plain's time" : "")};
    }
    var text = "plain (" + plain.label + ") fits: " + need + " " + fmtBytes(plain.need_bytes) + " of " + fmtBytes(budget)
      + "; no technique needed";
    var smaller = fits.filter(function (c) { return !c.baseline && c.need_bytes < plain.need_bytes; });
    var cheap = smaller.filter(function (c) { return trusted(c) && tied(c.relative_step_time, 1.0, error); });
    var pool = cheap.length ? cheap : smaller, small = null;
    pool.forEach(function (c) {
      if (small === null || cmpBig(c.need_bytes, small.need_bytes) < 0
          || (c.need_bytes === small.need_bytes && tieKey(c, small) < 0)) { small = c; }
    });
    var buys = [small === null ? "headroom: none needs less than plain"
      : "headroom: " + labelText(small) + " needs " + fmtBytes(small.need_bytes) + " (headroom "
        + fmtBytes(budget - small.need_bytes) + ", plain's " + fmtBytes(budget - plain.need_bytes) + "), "
        + timesText(small.relative_step_time) + " plain's time"];
    var fast = null;
    fits.forEach(function (c) {
      if (!c.baseline && trusted(c) && c.relative_step_time !== null && (fast === null || tieKey(c, fast) < 0)) { fast = c; }
    });
    buys.push(fast !== null && fast.relative_step_time < 1 - (error || 0)
      ? "speed: " + labelText(fast) + ", " + timesText(fast.relative_step_time) + " plain's time"
      : "speed: none predicted faster than plain beyond the time error");
    if (larger) {
      buys.push("a larger " + larger.size + ": " + larger.technique + " with " + labelText(larger.setting) + " ("
        + need + " " + fmtBytes(larger.setting.need_bytes) + "; plain up to " + larger.plain + ")");
    }
    var bought = small !== null || !!larger || (fast !== null && fast.relative_step_time < 1 - (error || 0));
    return {plain_fits: true, label: plain.label, need_bytes: plain.need_bytes, text: text,
            buys: bought ? "a technique would buy " + buys.join("; ") : null};
  }

  // -- the models (memlab.advisor.model, the loops of memlab.advisor.loops) ---------------------------
  function evalPoly(poly, values) {
    var total = 0n;
    Object.keys(poly).forEach(function (key) {
      var term = BigInt(poly[key]);
      if (key !== "1") {
        key.split("*").forEach(function (v) {
          if (values[v] === undefined) { throw new Error("the model uses " + v + ", which is not given"); }
          term *= BigInt(values[v]);
        });
      }
      total += term;
    });
    return total;
  }

  function loopOf(loop, params, chunked) {
    var values = {};
    loop.sizes.forEach(function (s) { values[s] = params[s]; });
    if (loop.kind === "chunks") {
      var n = params[loop.rows];
      var chunk = chunked ? Math.min(params[loop.knob], n) : n;
      var k = Math.floor(n / chunk);
      if (k * chunk < n) { k += 1; }
      values.chunk = chunk;
      values.last = n - (k - 1) * chunk;
      return {k: k, values: values};
    }
    if (loop.kind === "count") {               // size = per * k + offset (per 1, offset 0 unless stated)
      var per = loop.per === undefined ? 1 : loop.per, offset = loop.offset === undefined ? 0 : loop.offset;
      var v = params[loop.count] - offset;
      if (v % per !== 0 || v < per) {
        throw new Error(loop.count + "=" + params[loop.count] + " is not " + per + "k+" + offset + " (k >= 1)");
      }
      return {k: v / per, values: values};
    }
    if (loop.kind === "chunks_of") {           // each knob chunks its own rows (memlab.advisor.loops.ChunksOf)
      var given = chunked ? Object.keys(loop.knobs).filter(function (kn) { return params[kn] !== undefined; }) : [];
      if (given.length === 0) { return {k: 1, values: values}; }
      var rows = rowsOf(loop, given[0], params);
      var size = Math.min(params[given[0]], rows);
      var kk = Math.floor(rows / size);
      if (kk * size < rows) { kk += 1; }
      values.chunk = size;
      values.last = rows - (kk - 1) * size;
      return {k: kk, values: values};
    }
    if (loop.kind === "none") { return {k: 1, values: values}; }
    if (loop.kind === "repeated") {            // an outer loop around the inner one (memlab.advisor.loops.Repeated)
      var inner = loopOf(loop.inner, params, chunked);
      inner.values[loop.count] = params[loop.count];
      return inner;
    }
    throw new Error("loop kind " + loop.kind + " is not one this page evaluates");
  }

  function rowsOf(loop, knob, sizes) {        // the rows ``knob`` splits: a size, or a product of sizes
    if (loop.kind === "repeated") { return rowsOf(loop.inner, knob, sizes); }
    if (loop.kind === "chunks") { return sizes[loop.rows]; }
    return loop.knobs[knob].reduce(function (n, s) { return n * sizes[s]; }, 1);
  }

  function outerOk(c, values) {              // memlab.advisor.model._outer_ok: the outer loop's class
    if (!c.outer) { return true; }
    var n = values[c.outer.size];
    return c.outer.k !== undefined ? n === c.outer.k : n >= c.outer.k_min;
  }

  function classFor(classes, k, values) {
    classes = classes.filter(function (c) { return outerOk(c, values || {}); });
    for (var i = 0; i < classes.length; i++) {
      if (classes[i].k === k) { return {cls: classes[i], extra: {}}; }
    }
    for (var j = 0; j < classes.length; j++) {
      var c = classes[j];
      if (c.k_min !== undefined && k >= c.k_min) { return {cls: c, extra: {m: k - c.k_min}}; }
    }
    throw new Error("no model class covers loop count k=" + k);
  }

  function predict(fam, entry, params) {
    var lk = loopOf(fam.loop, params, entry.knobs.length > 0);
    var found = classFor(entry.classes, lk.k, lk.values);
    var values = Object.assign({}, lk.values, found.extra);
    var best = null;
    found.cls.pieces.forEach(function (piece) {
      var cats = {}, total = 0n;
      Object.keys(piece).forEach(function (c) { cats[c] = evalPoly(piece[c], values); total += cats[c]; });
      if (best === null || total > best.total) { best = {total: total, cats: cats}; }
    });
    var out = {};
    APP.categories.forEach(function (c) { out[c] = best.cats[c] === undefined ? 0n : best.cats[c]; });
    return {total: best.total, categories: out, k: lk.k};
  }

  // memlab.advisor.model.mmapped_bytes: bytes in allocations of at least `ceiling` (BigInt), or null
  function mmappedBytes(classes, k, values, ceiling) {
    var found = classFor(classes, k, values);
    if (!found.cls.allocations) { return null; }
    var m = BigInt(found.extra.m === undefined ? 0 : found.extra.m), total = 0n;
    var withM = Object.assign({}, values, {m: found.extra.m === undefined ? 0 : found.extra.m});
    found.cls.allocations.forEach(function (x) {
      var poly = {};
      poly[x[1]] = x[0];
      var size = evalPoly(poly, values);
      if (size >= ceiling) {                  // [q, mono, a, b]: a + b m copies; [q, mono, count polynomial]
        total += (x.length === 3 ? evalPoly(x[2], withM) : BigInt(x[2]) + BigInt(x[3]) * m) * size;
      }
    });
    return total;
  }

  function predictTime(fam, entry, params, device) {
    if (entry.baseline) { return 1; }   // the family baseline: 1 by definition (memlab.advisor.model.predict_time)
    var t = entry.time;
    if (!t) { return null; }
    if (t.kind === "constant") { return Number(t.a); }
    if (t.kind !== "work" && t.kind !== "components") { return null; }   // memlab.advisor.model.predict_time
    var k = entry.knobs && entry.knobs.length ? loopOf(fam.loop, params, true).k : 1;
    var ws = workOf(t.work, params);
    if (ws === null) { return null; }
    var f = t.fault ? t.fault.per_byte : 0;
    var mt = null, mb = null;
    if (device === "cpu" && f) {
      var ceiling = BigInt(t.fault.ceiling_bytes);
      var mine = loopOf(fam.loop, params, entry.knobs.length > 0);
      var base = loopOf(fam.loop, params, false);
      mt = mmappedBytes(entry.classes, mine.k, mine.values, ceiling);
      mb = mmappedBytes(t.fault.baseline, base.k, base.values, ceiling);
    }
    // memlab.advisor.model.chunk_bodies: k - 1 further loop bodies, times o_scale's sizes when the
    // knob's loop runs inside an outer loop (NOTE [ per-chunk costs ])
    var bodies = t.o_scale ? (k - 1) * Number(evalPoly(oneTerm(t.o_scale), params)) : k - 1;
    // a further chunk's cost o, plus o_work_cost times the sizes it grows with (predict_time's per_chunk)
    var perChunk = t.o + (t.o_work ? t.o_work_cost * Number(evalPoly(oneTerm(t.o_work), params)) : 0);
    if (t.kind === "components") {   // NOTE [ work components ]: sums in the components' sorted order
      var fm = 0, fmb = 0;
      if (mt !== null && mb !== null) { fm = f * Number(mt); fmb = f * Number(mb); }
      var num = t.c + bodies * perChunk, den = Number(t.baseline_cost["1"]);
      var split = t.r_per_chunk || {};
      ws.names.forEach(function (n) { num += t.r[n] * ws.values[n]; });
      Object.keys(split).sort().forEach(function (n) { num += split[n] * ws.values[n] / k; });
      ws.names.forEach(function (n) { den += t.baseline_cost[n] * ws.values[n]; });
      return (num + fm) / (den + fmb);
    }
    var w = ws.value;   // r + (c + (k - 1) o) / W, with the page-fault term on CPU
    if (mt === null || mb === null) { return t.r + (t.c + bodies * perChunk) / w; }
    return (t.r * w + t.c + bodies * perChunk + f * Number(mt)) / (w + f * Number(mb));
  }

  function oneTerm(mono) {   // {mono: 1}, an encoded polynomial of one monomial
    var poly = {};
    poly[mono] = 1;
    return poly;
  }

  // memlab.advisor.model.work_of: {value} of one monomial, or {names, values} of named components
  // (sorted names, as Python's sorted()); null when any is not positive
  function workOf(work, params) {
    var one = function (mono) {
      var poly = {};
      poly[mono] = 1;
      return Number(evalPoly(poly, params));
    };
    if (typeof work === "string") {
      var w = one(work);
      return w > 0 ? {value: w} : null;
    }
    var names = Object.keys(work).sort(), values = {}, ok = true;
    names.forEach(function (n) { values[n] = one(work[n]); ok = ok && values[n] > 0; });
    return ok ? {names: names, values: values} : null;
  }

  function knobCandidates(n, low, high) {   // memlab.advisor.loops.Chunks.knob_candidates
    var counts = new Set(), c = 1.0;
    while (c <= n) {
      counts.add(Math.trunc(c));
      counts.add(pyRound(c * 1.5, 0));
      c *= 2;
    }
    counts.add(n);
    var sizes = new Set();
    counts.forEach(function (k) {
      if (k >= 1 && k <= n) {
        var per = Math.floor(n / k);
        if (per * k < n) { per += 1; }
        sizes.add(Math.max(low, Math.min(high, per)));
      }
    });
    return Array.from(sizes).sort(function (a, b) { return a - b; });
  }

  function cudaNeed(total) {                 // memlab.advisor.advise.cuda_need
    var m = APP.cuda_margin;
    return BigInt(Math.trunc(Number(total) * (1 + m.fraction))) + BigInt(m.fixed_bytes) + BigInt(m.workspace_bytes);
  }

  function parseBudget(text) {               // memlab.advisor.advise.parse_budget
    var m = /^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$/.exec(String(text));
    var unit = m ? m[2].toLowerCase() : null;
    if (!m || !Object.prototype.hasOwnProperty.call(APP.units, unit)) {
      throw new Error("budget " + JSON.stringify(text) + " is not a memory size; write e.g. 2GiB, 1.5GB, 512MiB or bytes");
    }
    var value = parseFloat(m[1]) * APP.units[unit];
    if (!(value >= 1) || !isFinite(value)) { throw new Error("budget " + JSON.stringify(text) + " is not positive"); }
    if (value > Math.pow(2, 80)) {            // memlab.advisor.advise.MAX_BUDGET_BYTES
      throw new Error("budget " + JSON.stringify(text) + " is out of range: expected 1 byte to 1 YiB");
    }
    return BigInt(Math.trunc(value));
  }

  function parseSize(name, text, spec) {
    if (!/^\s*\+?[0-9]+\s*$/.test(String(text))) {
      throw new Error(name + "=" + JSON.stringify(text) + " is not a whole number (" + spec.low + " to " + spec.high + ")");
    }
    var v = Number(String(text).trim());
    if (v < spec.low || v > spec.high) {
      throw new Error(name + "=" + v + " is out of range: expected " + spec.low + " to " + spec.high);
    }
    return v;
  }

  function extrapolation(fam, sizes) {       // memlab.advisor.advise._extrapolation
    var out = [];
    Object.keys(fam.sizes).forEach(function (size) {
      var highs = fam.entries.filter(function (e) { return e.validated_range[size]; })
        .map(function (e) { return e.validated_range[size][1]; });
      if (highs.length && sizes[size] > Math.min.apply(null, highs)) {
        var hi = Math.min.apply(null, highs);
        out.push({param: size, value: sizes[size], validated_max: hi, factor: pyRound(sizes[size] / hi, 1)});
      }
    });
    return out;
  }

  function beyond(entry, params) {           // this entry's own validated range: the largest factor first
    var out = [];
    Object.keys(entry.validated_range).forEach(function (k) {
      var hi = entry.validated_range[k][1];
      if (params[k] !== undefined && params[k] > hi) { out.push({param: k, factor: params[k] / hi}); }
    });
    return out.sort(function (a, b) { return b.factor - a.factor; })
      .map(function (x) { return x.param + " ×" + pyFixed(x.factor, 1); });
  }

  function settingsOf(fam, entry, chosen, sizes) {   // memlab.advisor.advise._settings
    var settings = [{}];
    entry.knobs.forEach(function (knob) {
      if (chosen[knob] !== undefined) {
        var one = {};
        one[knob] = chosen[knob];
        settings = [one];
      } else {
        var spec = fam.knobs[knob];
        var rule = fam.loop.kind === "repeated" ? fam.loop.inner : fam.loop;
        settings = ["chunks", "chunks_of"].indexOf(rule.kind) < 0 ? []
          : knobCandidates(rowsOf(fam.loop, knob, sizes), spec.low, spec.high)
          .map(function (c) { var s = {}; s[knob] = c; return s; });
      }
    });
    return settings;
  }

  function largest(ok, low, high) {          // memlab.advisor.advise._largest: the same probes
    if (!ok(low)) { return null; }
    var good = low, bad = null;
    for (;;) {
      var next = Math.min(high, good * 2);
      if (next === good) { return good; }
      if (!ok(next)) { bad = next; break; }
      good = next;
    }
    while (bad - good > 1) {
      var mid = Math.floor((good + bad) / 2);
      if (ok(mid)) { good = mid; } else { bad = mid; }
    }
    return good;
  }

  function largerSize(fam, chosen, sizes, budget, device) {   // memlab.advisor.advise.larger_size
    var rule = fam.loop.kind === "repeated" ? fam.loop.inner : fam.loop;
    var name = fam.sizes.batch !== undefined ? "batch" : rule.rows;
    var plain = fam.entries.filter(function (e) { return e.baseline; })[0];
    if (name === undefined || fam.sizes[name] === undefined || !plain) { return null; }
    var needs = function (entries, v) {
      var at = Object.assign({}, sizes), out = [];
      at[name] = v;
      entries.forEach(function (e) {
        settingsOf(fam, e, chosen, at).forEach(function (knobs) {
          var pred = predict(fam, e, Object.assign({}, at, knobs));
          if (e.chunks_timed !== null && e.chunks_timed !== undefined && pred.k > e.chunks_timed) { return; }
          out.push({need: device === "cpu" ? pred.total : cudaNeed(pred.total), entry: e, knobs: knobs, k: pred.k});
        });
      });
      return out;
    };
    var others = fam.entries.filter(function (e) { return !e.baseline && e.recommendable; });
    var high = fam.sizes[name].high;
    var top = largest(function (v) { return needs([plain], v)[0].need <= budget; }, sizes[name], high);
    var reach = largest(function (v) { return needs(others, v).some(function (x) { return x.need <= budget; }); },
                        sizes[name], high);
    if (top === null || reach === null || reach <= top) { return null; }
    var least = needs(others, reach).reduce(function (a, x) { return x.need < a.need ? x : a; });
    return {size: name, plain: top, technique: reach,
            setting: {label: least.entry.label, knobs: least.knobs, chunks: least.k, need_bytes: least.need}};
  }

  // one question's budget (BigInt bytes), device, sizes (given or default) and fixed knobs, checked
  // against the family's ranges: advise() and adviseMicro() read it alike (advisor.advise.read_query)
  function readQuery(fam, query) {
    var budget = typeof query.budget === "bigint" ? query.budget : parseBudget(query.budget);
    var device = query.device === "cuda" ? "cuda" : "cpu";
    var sizes = {}, chosen = {};
    Object.keys(fam.sizes).forEach(function (s) {
      var given = query.sizes && query.sizes[s] !== undefined && query.sizes[s] !== "";
      sizes[s] = given ? parseSize(s, query.sizes[s], fam.sizes[s]) : fam.sizes[s]["default"];
    });
    Object.keys(fam.knobs).forEach(function (k) {
      if (query.knobs && query.knobs[k] !== undefined && query.knobs[k] !== "") {
        chosen[k] = parseSize(k, query.knobs[k], fam.knobs[k]);
      }
    });
    return {budget: budget, device: device, sizes: sizes, chosen: chosen};
  }

  // query: {family, optimizer, device, budget (text or BigInt), sizes: {name: int}, knobs: {name: int}}
  function advise(query) {
    var model = APP.models[query.optimizer];
    if (!model) { throw new Error("no models for optimizer " + query.optimizer); }
    var fam = model.families[query.family];
    if (!fam) { throw new Error("no " + query.family + " models for optimizer " + query.optimizer); }
    var q = readQuery(fam, query), budget = q.budget, device = q.device, sizes = q.sizes, chosen = q.chosen;
    var candidates = [];
    fam.entries.forEach(function (entry) {
      settingsOf(fam, entry, chosen, sizes).forEach(function (knobs) {
        var p = Object.assign({}, sizes, knobs);
        var pred = predict(fam, entry, p);
        var need = device === "cpu" ? pred.total : cudaNeed(pred.total);
        var raw = predictTime(fam, entry, p, device);
        // memlab.advisor.model.clamp_time: no faster than plain unless a measured ratio says so
        var floored = raw !== null && entry.time_floor !== null && entry.time_floor !== undefined && raw < entry.time_floor;
        var t = floored ? entry.time_floor : raw;
        candidates.push({technique: entry.technique, label: entry.label, peer: entry.peer, knobs: knobs,
                         baseline: entry.baseline, time_ranked: device === "cpu" || !entry.changes_dtype,
                         time_floored: floored, time_band: entry.time_band,
                         chunks_timed: entry.chunks_timed !== null && entry.chunks_timed !== undefined
                           && pred.k > entry.chunks_timed ? entry.chunks_timed : null,
                         total_peak_bytes: pred.total, peak_by_category_bytes: pred.categories, need_bytes: need,
                         headroom_bytes: budget - need, fits: need <= budget,
                         relative_step_time: t === null ? null : pyRound(t, 3), chunks: pred.k,
                         recommendable: entry.recommendable, error: entry.error, beyond: beyond(entry, p)});
      });
    });
    var usable = candidates.filter(function (c) { return c.recommendable; });
    var terr = fam.time_error || {fraction: null, text: ""};
    var fits = orderFits(usable.filter(function (c) { return c.fits; }), terr.fraction);
    var cannot = [], labels = [];
    candidates.forEach(function (c) { if (labels.indexOf(c.label) < 0) { labels.push(c.label); } });
    labels.forEach(function (label) {
      var mine = candidates.filter(function (c) { return c.label === label; });
      if (!mine.some(function (c) { return c.fits; }) || !mine[0].recommendable) {
        var best = mine.reduce(function (a, c) { return c.need_bytes < a.need_bytes ? c : a; });
        cannot.push({label: label, technique: best.technique, peer: best.peer, smallest_need_bytes: best.need_bytes,
                     knobs: best.knobs, chunks: best.chunks, recommendable: best.recommendable, setting: best});
      }
    });
    var timed = usable.filter(function (c) { return c.relative_step_time !== null; });
    var front = timed.filter(function (c) {
      return !timed.some(function (o) {
        return o.need_bytes <= c.need_bytes && o.relative_step_time <= c.relative_step_time
          && !(o.need_bytes === c.need_bytes && o.relative_step_time === c.relative_step_time);
      });
    });
    var unique = new Map();
    front.forEach(function (c) {
      var key = c.label + "|" + JSON.stringify(Object.keys(c.knobs).sort().map(function (k) { return [k, c.knobs[k]]; }));
      unique.set(key, c);
    });
    var pareto = Array.from(unique.values()).sort(function (a, b) { return cmpBig(a.need_bytes, b.need_bytes); });
    var smallest = null;
    if (!fits.length) {
      var pool = usable.length ? usable : candidates;
      smallest = pool.reduce(function (a, c) { return c.need_bytes < a.need_bytes ? c : a; });
    }
    return {family: query.family, optimizer: query.optimizer, device: device, budget_bytes: budget, sizes: sizes,
            knobs: chosen, fits: fits, pareto: pareto, cannot_fit: cannot, smallest: smallest, time_error: terr,
            plain: plainVerdict(candidates, fits, budget, terr.fraction, device === "cpu" ? "peak" : "CUDA need",
                                fits.length && fits[0].baseline ? largerSize(fam, chosen, sizes, budget, device) : null),
            not_modelled: fam.not_modelled || [],
            extrapolation: extrapolation(fam, sizes), model: model, candidates: candidates.length};
  }

  // -- micro-batches: memlab.advisor.micro (NOTE [ micro-batches from a whole-step model ]) ----------
  var MAX_ACCUMULATE = 1024;                  // memlab.core.setting.MAX_ACCUMULATE
  var BATCH_VARIABLES = ["batch", "chunk", "last"];

  function piecesAt(fam, entry, params) {     // memlab.advisor.model.pieces_at (absent categories as 0)
    var lk = loopOf(fam.loop, params, entry.knobs.length > 0);
    var found = classFor(entry.classes, lk.k, lk.values);
    var values = Object.assign({}, lk.values, found.extra);
    return {k: lk.k, pieces: found.cls.pieces.map(function (piece) {
      var cats = {};
      APP.categories.forEach(function (c) { cats[c] = piece[c] === undefined ? 0n : evalPoly(piece[c], values); });
      return cats;
    })};
  }

  function sumOf(cats) { return APP.categories.reduce(function (t, c) { return t + cats[c]; }, 0n); }

  function firstMax(items, key) {             // Python's max(range(n), key=(value, -i)): the first largest
    var best = 0;
    items.forEach(function (x, i) { if (key(x) > key(items[best])) { best = i; } });
    return best;
  }

  function inputGradients(entry) {            // micro._input_gradients
    return entry.classes.some(function (cls) {
      return cls.pieces.some(function (p) {
        return Object.keys(p.gradients || {}).some(function (mono) {
          return mono.split("*").some(function (v) { return BATCH_VARIABLES.indexOf(v) >= 0; });
        });
      });
    });
  }

  function accumulated(fam, entry, params, parts) {   // micro.accumulated: the low and high bounds (BigInt)
    var batch = params.batch;
    if (parts < 1 || batch % parts !== 0) {
      throw new Error("micro_batches=" + parts + " does not split batch=" + batch + "; valid: a divisor of " + batch);
    }
    var pa = piecesAt(fam, entry, Object.assign({}, params, {batch: batch / parts}));
    var cats = pa.pieces[firstMax(pa.pieces, sumOf)];
    var total = sumOf(cats);
    if (parts === 1) { return {low: total, high: total, exact: true, categories: cats, k: pa.k, terms: null}; }
    var whole = predict(fam, entry, params).categories.inputs;
    var gMax = pa.pieces.reduce(function (g, p) { return p.gradients > g ? p.gradients : g; }, 0n);
    var gradsIn = inputGradients(entry);
    var lowCats = pa.pieces[firstMax(pa.pieces, function (p) { return sumOf(p) - p.gradients; })];
    var low = sumOf(lowCats) - lowCats.gradients + gMax + whole - lowCats.inputs;
    var under = BigInt(entry.measured_under_bytes || 0);
    var high = total + whole - cats.inputs + cats.parameters + (gradsIn ? 2n * whole : 0n) + under;
    return {low: low, high: high, exact: low === high, k: pa.k,
            categories: Object.assign({}, lowCats, {inputs: whole, gradients: gMax}),
            terms: {peak: total, gradients_at_peak: cats.gradients, gradients_largest: gMax,
                    without_gradients: sumOf(lowCats) - lowCats.gradients, parameters: cats.parameters,
                    inputs_whole: whole, input_gradients: gradsIn, measured_under: under}};
  }

  function microWhy(t) {                      // micro._why
    var out = [];
    if (t.without_gradients < t.peak) {
      out.push("every fitted moment of the whole step holds gradients (" + fmtBytes(t.gradients_at_peak) + " at its peak): "
               + "with all of them present from the second micro-batch on, which moment peaks is no term of the fit");
    }
    if (t.parameters !== t.gradients_largest) {
      out.push("parameters and buffers (" + fmtBytes(t.parameters) + ") are not the largest gradients of any fitted "
               + "moment (" + fmtBytes(t.gradients_largest) + ")");
    }
    if (t.input_gradients) {
      out.push("an input takes a gradient: the whole batch's and its slice's backward, at most 2 x " + fmtBytes(t.inputs_whole));
    }
    if (t.measured_under) {
      out.push("the whole-step model read up to " + fmtBytes(t.measured_under) + " low at its measured held-out points "
               + "(scratch its one-thread traces do not hold)");
    }
    return out.length ? out.join("; ") : "the bounds differ";
  }

  function microCounts(batch) {               // micro.micro_counts
    var out = [];
    for (var k = 1; k <= Math.min(batch, MAX_ACCUMULATE); k++) { if (batch % k === 0) { out.push(k); } }
    return out;
  }

  function timeOf(fam, entry, p, device, k) { // advise.time_fields (the time floored, to 3 decimals)
    var raw = predictTime(fam, entry, p, device);
    var floored = raw !== null && entry.time_floor !== null && entry.time_floor !== undefined && raw < entry.time_floor;
    var t = floored ? entry.time_floor : raw;
    return {relative_step_time: t === null ? null : pyRound(t, 3), time_floored: floored,
            time_ranked: device === "cpu" || !entry.changes_dtype, time_band: entry.time_band,
            chunks_timed: entry.chunks_timed !== null && entry.chunks_timed !== undefined && k > entry.chunks_timed
              ? entry.chunks_timed : null};
  }

  function fastest(settings, need) {          // micro._fastest
    var key = function (s) { var t = s.time.relative_step_time; return [t === null ? 1 : 0, t || 0.0]; };
    return settings.reduce(function (a, s) {
      var ka = key(a), ks = key(s);
      if (ks[0] !== ka[0]) { return ks[0] < ka[0] ? s : a; }
      if (ks[1] !== ka[1]) { return ks[1] < ka[1] ? s : a; }
      return s[need] < a[need] ? s : a;
    });
  }

  function fewest(fam, entry, chosen, sizes, budget, device) {   // micro._fewest
    var fits = null, may = null, last = [];
    var counts = microCounts(sizes.batch);
    for (var i = 0; i < counts.length; i++) {
      var parts = counts[i];
      var at = Object.assign({}, sizes, {batch: sizes.batch / parts});
      var found = settingsOf(fam, entry, chosen, at).map(function (knobs) {
        var acc = accumulated(fam, entry, Object.assign({}, sizes, knobs), parts);
        var need = device === "cpu" ? function (b) { return b; } : cudaNeed;
        return Object.assign(acc, {knobs: knobs, parts: parts, need_low: need(acc.low), need_high: need(acc.high),
                                   chunks: acc.k, time: timeOf(fam, entry, Object.assign({}, at, knobs), device, acc.k)});
      });
      if (found.length) { last = found; }
      var low = found.filter(function (s) { return s.need_low <= budget; });
      if (may === null && low.length) { may = fastest(low, "need_low"); }
      var ok = found.filter(function (s) { return s.need_high <= budget; });
      if (ok.length) { fits = fastest(ok, "need_high"); break; }
    }
    var smallest = last.length && may === null
      ? last.reduce(function (a, s) { return s.need_low < a.need_low ? s : a; }) : null;
    return {fits: fits, may_fit: may, smallest: smallest};
  }

  function adviseMicro(query) {               // micro.advise_micro: null for a family without a batch
    var model = APP.models[query.optimizer];
    var fam = model && model.families[query.family];
    if (!fam || fam.sizes.batch === undefined) { return null; }
    var q = readQuery(fam, query), budget = q.budget, device = q.device, sizes = q.sizes, chosen = q.chosen;
    var answers = [], unranked = [], cannot = [];
    fam.entries.forEach(function (entry) {
      var found = fewest(fam, entry, chosen, sizes, budget, device);
      var best = found.fits || found.may_fit;
      if (best === null || !entry.recommendable) {
        var pool = [found.smallest, found.may_fit, found.fits].filter(function (s) { return s; });
        var least = pool.length ? pool.reduce(function (a, s) { return s.need_low < a.need_low ? s : a; }) : null;
        cannot.push({technique: entry.technique, label: entry.label, peer: entry.peer, recommendable: entry.recommendable,
                     smallest_need_bytes: least ? least.need_low : null,
                     at: least ? Object.assign({micro_batches: least.parts}, least.knobs) : null});
        return;
      }
      var row = Object.assign({technique: entry.technique, label: entry.label, peer: entry.peer, knobs: best.knobs,
        chunks: best.chunks, size: best.parts, micro_batch: sizes.batch / best.parts, exact: best.exact,
        low_bytes: best.low, high_bytes: best.high, need_bytes: best.need_high, need_low_bytes: best.need_low,
        fits: best.need_high <= budget, peak_by_category_bytes: best.categories, baseline: entry.baseline,
        why: best.exact ? null : microWhy(best.terms), may_fit_from: found.may_fit ? found.may_fit.parts : null},
        best.time);
      if (found.fits && best.exact) { answers.push(row); } else {
        row.size = found.fits ? found.fits.parts : null;
        unranked.push(row);
      }
    });
    answers.sort(function (a, b) {
      var ta = a.relative_step_time || Infinity, tb = b.relative_step_time || Infinity;
      return a.size - b.size || (a.baseline === b.baseline ? 0 : (a.baseline ? -1 : 1)) || (ta < tb ? -1 : (ta > tb ? 1 : 0));
    });
    answers.forEach(function (c, i) { c.rank = i + 1; });
    return {family: query.family, batch: sizes.batch, sizes: sizes, budget_bytes: budget, device: device,
            answers: answers, unranked: unranked, cannot_fit: cannot};
  }

  // -- the page ------------------------------------------------------------------------------------
  function esc(text) {        // for plotly's pseudo-HTML and for innerHTML
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  }

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (attrs[k] === null || attrs[k] === undefined || attrs[k] === false) { return; }
      if (k === "text") { node.textContent = attrs[k]; } else { node.setAttribute(k, attrs[k] === true ? "" : attrs[k]); }
    });
    (children || []).forEach(function (c) { if (c) { node.appendChild(typeof c === "string" ? document.createTextNode(c) : c); } });
    return node;
  }

  // c: a candidate (or cannot-fit row): its label ("slice_accumulate[backward=manual]") is shown, its
  // technique's colour (one per technique on every page, APP.colors) fills the swatch.
  function tech(c) {
    var color = APP.colors[c.technique];
    if (!color) { console.error("no colour for technique " + c.technique); color = "#444444"; }
    return [el("span", {"class": "swatch", "data-technique": c.technique, title: c.technique,
                        style: "background:" + color}),
            el("span", {"class": "tech", text: c.label}), c.peer ? el("span", {"class": "badge peer", text: "peer"}) : null];
  }

  function knobText(c) {
    var parts = Object.keys(c.knobs).map(function (k) { return k + "=" + c.knobs[k]; });
    return parts.length ? parts.join(" ") + " (" + c.chunks + " chunk" + (c.chunks === 1 ? "" : "s") + ")" : "-";
  }

  function labelText(c) {     // "slice_accumulate[backward=manual] chunk_size=2500 (4 chunks)"
    var k = knobText(c);
    return c.label + (k === "-" ? "" : " " + k);
  }

  function table(id, columns, rows, caption) {
    var head = el("tr", {}, columns.map(function (col) {
      return el("th", {"data-type": col.num ? "num" : null, title: col.title || null, text: col.label});
    }));
    var body = el("tbody", {}, rows.map(function (r) {
      return el("tr", {"class": r.cls || null}, columns.map(function (col) {
        var v = r.cells[col.key];
        if (col.num) {
          return el("td", {"class": "num", "data-sort": r.sort[col.key] === undefined ? null : String(r.sort[col.key]),
                           text: v});
        }
        return el("td", {}, Array.isArray(v) ? v : [String(v)]);
      }));
    }));
    var t = el("table", {"class": "rows sortable"}, [el("thead", {}, [head]), body]);
    t.querySelectorAll("thead th").forEach(function (th) {
      th.setAttribute("tabindex", "0");
      th.addEventListener("click", function () {   // a sorted table shows every row
        var box = th.closest(".table-box");
        box.querySelectorAll("tbody tr[hidden]").forEach(function (r) { r.hidden = false; });
        box.querySelectorAll("button.show-all").forEach(function (b) { b.remove(); });
        window.sortTable(th);
      });
    });
    return el("div", {"class": "table-box choose-table", id: id}, [
      el("p", {"class": "table-tools"}, [el("a", {"class": "anchor", href: "#" + id, text: "#"}),
        " " + rows.length + " row(s)" + (caption ? " · " + caption : "") + " · click a header to sort"]), t]);
  }

  function timeCell(c) {      // memlab.advisor.advise.time_cell: the prediction and its marks
    var marks = [];
    if (c.time_floored) { marks.push("floored: no faster than measured"); }
    if (c.chunks_timed !== null && c.chunks_timed !== undefined) {
      marks.push(c.chunks + " chunks, " + c.chunks_timed + " timed: likely slower");
    }
    if (!c.time_ranked) { marks.push("dtype: not ranked"); }
    return fmtRel(c.relative_step_time) + (marks.length ? " (" + marks.join("; ") + ")" : "");
  }

  function fitRows(a, pareto) {
    return a.fits.map(function (c) {
      var onFront = pareto.indexOf(c) >= 0;
      return {
        cells: {rank: c.rank === null ? "-" : String(c.rank), technique: tech(c), setting: knobText(c),
                need: fmtMiB(c.need_bytes), headroom: fmtMiB(c.headroom_bytes),
                time: timeCell(c), band: c.time_band ? c.time_band.text : "-",
                front: onFront ? "on the front" : "",
                beyond: c.beyond.length ? [el("span", {title: "beyond this model's validated range: " + c.beyond.join(", "),
                                                       text: "⚠ " + c.beyond[0] + (c.beyond.length > 1 ? " …" : "")})] : ""},
        sort: {rank: c.rank === null ? undefined : c.rank, need: c.need_bytes.toString(), headroom: c.headroom_bytes.toString(),
               time: c.relative_step_time === null ? undefined : c.relative_step_time}};
    });
  }

  function categoryChart(a) {
    // one bar per technique: its first-ranked fitting setting, else its smallest one (does not fit)
    var items = [], seen = {};
    a.fits.forEach(function (c) { if (!seen[c.label]) { seen[c.label] = 1; items.push({c: c, fits: true}); } });
    a.cannot_fit.forEach(function (x) { if (!seen[x.label]) { seen[x.label] = 1; items.push({c: x.setting, fits: false}); } });
    items.reverse();
    var names = items.map(function (it) {
      return esc(labelText(it.c)) + (it.fits ? "" : " (does not fit)");
    });
    var data = [];
    APP.categories.forEach(function (cat) {
      var xs = items.map(function (it) { return Math.round(Number(it.c.peak_by_category_bytes[cat]) / MiB * 1e4) / 1e4; });
      if (!xs.some(function (x) { return x; })) { return; }
      data.push({type: "bar", orientation: "h", name: esc(APP.category_names[cat] || cat), y: names, x: xs,
                 marker: {color: APP.category_colors[cat]}, hoverinfo: "x+y+name"});
    });
    if (a.device === "cuda") {
      data.push({type: "bar", orientation: "h", name: "CUDA margin (stated)", y: names,
                 x: items.map(function (it) { return Math.round(Number(it.c.need_bytes - it.c.total_peak_bytes) / MiB * 1e4) / 1e4; }),
                 marker: {color: "#bdbdbd", pattern: {shape: "/"}}, hoverinfo: "x+y+name"});
    }
    var budget = Number(a.budget_bytes) / MiB;
    var layout = {barmode: "stack", hovermode: "closest", height: Math.max(220, 130 + 36 * items.length),
                  margin: {l: 20, r: 20, t: 64, b: 50},
                  legend: {orientation: "h", y: 1.0, x: 0, xanchor: "left", yanchor: "bottom", traceorder: "normal"},
                  xaxis: {title: {text: (a.device === "cuda" ? "predicted CUDA need" : "predicted total peak") + " (MiB)"},
                          zeroline: false, tickformat: ","},
                  yaxis: {title: {text: ""}, type: "category", automargin: true},
                  shapes: [{type: "line", xref: "x", yref: "paper", x0: budget, x1: budget, y0: 0, y1: 1,
                            line: {color: "#9a1f1f", width: 2, dash: "dash"}}],
                  annotations: [{x: budget, y: 1, xref: "x", yref: "paper", xanchor: "left", yanchor: "top",
                                 showarrow: false, bgcolor: "rgba(255,255,255,0.85)",
                                 text: "budget " + esc(fmtMiB(a.budget_bytes)), font: {color: "#9a1f1f"}}]};
    return {data: data, layout: layout};
  }

  function render(a) {
    var box = document.getElementById("choose-answer");
    box.textContent = "";
    var need = a.device === "cuda" ? "CUDA need" : "predicted peak";
    var sizesText = Object.keys(a.sizes).map(function (k) { return k + "=" + a.sizes[k]; }).join(", ");
    var first = a.fits[0];
    var verdict = a.plain ? [el("p", {}, [el("strong", {text: a.plain.text})])]
      .concat(a.plain.buys ? [el("p", {text: a.plain.buys})] : []) : [];
    var head = el("div", {"class": "headline", id: "choose-plain"}, verdict.concat([el("p", {}, first ? [
      el("strong", {text: "First choice: "}), ].concat(tech(first)).concat([
      " " + knobText(first).replace(/^-$/, "") + ": " + need + " " + fmtMiB(first.need_bytes) + " of "
      + fmtMiB(a.budget_bytes) + " (headroom " + fmtMiB(first.headroom_bytes) + "), about "
      + timeCell(first) + " the plain step's time. " + a.fits.length + " of " + a.candidates
      + " settings fit."]) : [el("strong", {text: "Nothing fits: "}),
      "no modelled " + a.family + " technique fits " + fmtMiB(a.budget_bytes) + "; the smallest " + need + " is "
      + fmtMiB(a.smallest.need_bytes) + " (" + labelText(a.smallest) + ")."])]));
    box.appendChild(head);
    box.appendChild(el("p", {"class": "note", text: a.family + " at " + sizesText + ", optimizer " + a.optimizer + ", "
      + (a.device === "cuda" ? "CUDA (exact peak × " + pyFixed(1 + APP.cuda_margin.fraction, 2) + " + "
         + fmtMiB(APP.cuda_margin.fixed_bytes) + " + " + fmtMiB(APP.cuda_margin.workspace_bytes)
         + " cuBLAS workspaces; the CUDA context not included)" : "CPU (exact bytes)")
      + "; models of float32 training steps fitted at memlab " + (a.model.memlab_commit || "?").slice(0, 12) + ". "
      + "Ranked: the plain step first when it fits, then by predicted relative step time; times within the "
      + "family's time error (" + (a.time_error.text || "none recorded") + ") share a rank."
      + " Each setting's time error is its model's largest residual over its own measured points (unknown where the "
      + "fit has no more points than coefficients); no setting is predicted faster than plain beyond a measured ratio "
      + "(floored), and a setting with more chunks than its model timed is marked: such settings measured slower than predicted."
      + (a.device === "cuda" ? " Relative time measured on CPU: a GPU can rank close settings differently, "
         + "and a technique that changes the dtype is not ranked by it." : "")}));
    if (a.extrapolation.length) {
      box.appendChild(el("p", {"class": "extrapolated", id: "choose-extrapolation", text: "⚠ Beyond the validated range: "
        + a.extrapolation.map(function (x) { return x.param + "=" + x.value + " is " + pyFixed(x.factor, 1)
          + "× the largest validated (" + x.validated_max + ")"; }).join("; ")
        + ". The models' form is exact wherever the step's allocations follow the same sequence; nothing this large was measured."}));
    }
    var cols = [{key: "rank", label: "#", num: true}, {key: "technique", label: "technique"},
                {key: "setting", label: "setting"},
                {key: "need", label: need, num: true, title: a.device === "cuda" ? "exact total peak plus the stated CUDA margin" : "predicted total peak of the step, baseline included (exact model)"},
                {key: "headroom", label: "headroom", num: true, title: "budget minus the " + need},
                {key: "time", label: a.device === "cuda" ? "relative time measured on CPU (predicted)" : "relative step (predicted)",
                 num: true, title: "technique step over the plain reference step, thread CPU time on CPU: approximate"},
                {key: "band", label: "time error", title: "the time model's largest residual over its own points "
                 + "(NOTE [ the time band ]); unknown where the fit has no more points than coefficients"},
                {key: "front", label: "Pareto", title: "no other setting needs less memory and less time"},
                {key: "beyond", label: "extrapolated", title: "sizes beyond this model's validated range, with the factor"}];
    box.appendChild(el("figure", {"class": "chart-box", id: "categories"}, [
        el("h3", {"class": "chart-title"}, ["Predicted peak by memory category ",
                                            el("a", {"class": "anchor", href: "#categories", text: "#"})]),
        el("div", {"class": "chart", id: "categories-plot"}),
        el("figcaption", {text: "Each technique's first-ranked setting that fits (and, for a technique that cannot fit, its "
          + "smallest setting), its predicted peak split by category; the dashed line is the budget."})]));
    if (a.fits.length) {
      box.appendChild(el("h3", {id: "fits", text: "Settings that fit, plain first, then by predicted time (ties share a rank)"}));
      var shown = SHOWN;
      var fits = table("fits-table", cols, fitRows(a, a.pareto), "plain first when it fits, then by predicted relative step time; tied times share a rank");
      var rows = fits.querySelectorAll("tbody tr");
      if (rows.length > shown) {
        Array.prototype.slice.call(rows, shown).forEach(function (r) { r.hidden = true; });
        var more = el("button", {type: "button", "class": "show-all", text: "Show all " + rows.length + " settings"});
        more.addEventListener("click", function () {
          rows.forEach(function (r) { r.hidden = false; });
          more.remove();
        });
        fits.appendChild(more);
      }
      box.appendChild(fits);
    }
    if (a.pareto.length) {
      box.appendChild(el("h3", {id: "pareto", text: "Pareto front: " + need + " vs relative step time"}));
      box.appendChild(table("pareto-table", [{key: "technique", label: "technique"}, {key: "setting", label: "setting"},
        {key: "need", label: need, num: true}, {key: "time", label: "relative step (predicted)", num: true},
        {key: "fits", label: "fits the budget"}], a.pareto.map(function (c) {
          return {cells: {technique: tech(c), setting: knobText(c), need: fmtMiB(c.need_bytes),
                          time: fmtRel(c.relative_step_time), fits: c.fits ? "yes" : "no"},
                  sort: {need: c.need_bytes.toString(), time: c.relative_step_time}};
        }), "settings no other beats on both memory and time"));
    }
    if (a.cannot_fit.length) {
      box.appendChild(el("h3", {id: "cannot-fit", text: "Cannot fit at any setting"}));
      box.appendChild(table("cannot-table", [{key: "technique", label: "technique"},
        {key: "need", label: "smallest " + need, num: true}, {key: "setting", label: "at"},
        {key: "why", label: "note"}], a.cannot_fit.map(function (c) {
          return {cells: {technique: tech(c), need: fmtMiB(c.smallest_need_bytes), setting: knobText(c),
                          why: c.recommendable ? "" : "not recommended: a held-out measurement was not ok"},
                  sort: {need: c.smallest_need_bytes.toString()}};
        }), "the smallest each reaches"));
    }
    if (a.not_modelled.length) {
      box.appendChild(el("h3", {id: "not-modelled", text: "Not modelled (with the reason)"}));
      box.appendChild(el("ul", {"class": "not-modelled"}, a.not_modelled.map(function (x) {
        var setting = Object.keys(x.params).map(function (k) { return k + "=" + pyValue(x.params[k]); }).join(", ");
        return el("li", {}, [el("code", {text: x.technique}), (setting ? " [" + setting + "]" : "") + ": " + x.reason]);
      })));
    }
    if (window.Plotly) {
      var fig = categoryChart(a);
      var div = document.getElementById("categories-plot");
      Plotly.newPlot(div, fig.data, fig.layout, {responsive: true, displaylogo: false})
        .then(function () { div.setAttribute("data-drawn", String(fig.data.length)); })
        .catch(function (err) { console.error("chart categories: " + err); });
    }
  }

  function renderMicro(m, family) {           // the micro-batches section (NOTE [ micro-batches from a whole-step model ])
    var box = document.getElementById("choose-answer");
    box.appendChild(el("h3", {id: "micro-batches", text: "Micro-batches: the batch as K micro-batches (--accumulate K)"}));
    if (m === null) {
      box.appendChild(el("p", {"class": "note", text: family + " has no batch size: it is not split into micro-batches here."}));
      return;
    }
    var need = m.device === "cuda" ? "CUDA need" : "peak";
    box.appendChild(el("p", {"class": "note", text: "Per technique, the fewest micro-batches K of batch=" + m.batch
      + " predicted to fit " + fmtMiB(m.budget_bytes) + ": the whole-step model at batch B/K plus the whole batch's "
      + "inputs and every gradient (the models were fitted without accumulation). Where the model holds every term the "
      + "prediction is exact and ranked (fewest K, plain first, then predicted time against plain at B/K); elsewhere "
      + "it is a low and a high bound, unranked, with the term the fit lacks, and fits by its high bound. "
      + "memlab advise --family " + m.family + " --vary micro_batches gives the same answer."}));
    var rows = m.answers.concat(m.unranked).map(function (c) {
      return {cells: {rank: c.rank ? String(c.rank) : "-", technique: tech(c), setting: knobText(c),
                      k: c.size ? c.size + " x " + c.micro_batch : "from " + c.may_fit_from + "?",
                      need: c.exact ? fmtMiB(c.need_bytes) : fmtMiB(c.need_low_bytes) + " .. " + fmtMiB(c.need_bytes),
                      time: timeCell(c), bytes: c.exact ? "exact" : "bounds, unranked: " + c.why},
              sort: {rank: c.rank || undefined, need: c.need_bytes.toString(), time: c.relative_step_time === null ? undefined : c.relative_step_time}};
    });
    if (rows.length) {
      box.appendChild(table("micro-table", [{key: "rank", label: "#", num: true}, {key: "technique", label: "technique"},
        {key: "setting", label: "setting"}, {key: "k", label: "micro-batches", title: "K x B/K"},
        {key: "need", label: need, num: true, title: "exact, or the low .. high bound"},
        {key: "time", label: "relative step at B/K (predicted)", num: true},
        {key: "bytes", label: "bytes"}], rows, "fewest micro-batches first"));
    }
    if (m.cannot_fit.length) {
      box.appendChild(el("ul", {"class": "not-modelled"}, m.cannot_fit.map(function (c) {
        return el("li", {}, [el("code", {text: c.label}), ": does not fit in " + m.batch + " micro-batches of 1"
          + (c.smallest_need_bytes === null ? "" : "; smallest " + need + " " + fmtMiB(c.smallest_need_bytes))
          + (c.recommendable ? "" : " (not recommended: a held-out measurement was not ok)")]);
      })));
    }
  }

  // -- the form and the URL ------------------------------------------------------------------------
  var form, fields = {};

  function currentFamily() {
    var m = APP.models[form.elements.optimizer.value] || APP.models[APP.default_optimizer];
    return m.families[form.elements.family.value];
  }

  function buildInputs(values) {
    var fam = currentFamily();
    ["sizes", "knobs"].forEach(function (kind) {
      var box = document.getElementById("choose-" + kind);
      box.querySelectorAll("label").forEach(function (l) { l.remove(); });
      var names = kind === "sizes" ? (fam.order || Object.keys(fam.sizes)) : Object.keys(fam.knobs);
      names.forEach(function (name) {
        var spec = fam[kind][name];
        var v = values[name] !== undefined ? values[name] : (kind === "sizes" ? String(spec["default"]) : "");
        var input = el("input", {name: "p:" + name, value: v, size: 9, inputmode: "numeric",
                                 title: (spec.doc || name) + " (" + spec.low + " to " + spec.high + ")",
                                 placeholder: kind === "knobs" ? "try settings" : null});
        box.appendChild(el("label", {}, [name + " ", input]));
      });
      box.hidden = !names.length;
    });
  }

  function readForm() {
    var q = {family: form.elements.family.value, optimizer: form.elements.optimizer.value,
             device: form.elements.device.value, budget: form.elements.budget.value.trim(), sizes: {}, knobs: {}};
    var fam = currentFamily();
    Object.keys(fam.sizes).forEach(function (s) { q.sizes[s] = form.elements["p:" + s].value.trim(); });
    Object.keys(fam.knobs).forEach(function (k) { q.knobs[k] = form.elements["p:" + k].value.trim(); });
    return q;
  }

  function toHash(q) {
    var parts = [["family", q.family], ["optimizer", q.optimizer], ["device", q.device], ["budget", q.budget]];
    Object.keys(q.sizes).forEach(function (k) { parts.push([k, q.sizes[k]]); });
    Object.keys(q.knobs).forEach(function (k) { if (q.knobs[k] !== "") { parts.push([k, q.knobs[k]]); } });
    return parts.map(function (p) { return encodeURIComponent(p[0]) + "=" + encodeURIComponent(p[1]); }).join("&");
  }

  function fromHash() {
    var h = location.hash.slice(1), out = {};
    if (h.indexOf("=") < 0) { return null; }
    h.split("&").forEach(function (part) {
      var i = part.indexOf("=");
      if (i > 0) {
        try { out[decodeURIComponent(part.slice(0, i))] = decodeURIComponent(part.slice(i + 1)); } catch (e) { /* skip */ }
      }
    });
    return out;
  }

  function choose(write) {
    var err = document.getElementById("choose-error");
    var q = readForm();
    var hash = toHash(q);
    document.getElementById("choose-permalink").setAttribute("href", "#" + hash);
    if (write) {
      try { history.replaceState(null, "", "#" + hash); } catch (e) { location.hash = hash; }
    }
    try {
      var a = advise(q);
      err.hidden = true;
      render(a);
      renderMicro(adviseMicro(q), q.family);
      return a;
    } catch (e) {
      err.hidden = false;
      err.textContent = e.message;
      document.getElementById("choose-answer").textContent = "";
      return null;
    }
  }

  function apply(values) {
    ["family", "optimizer", "device", "budget"].forEach(function (k) {
      if (values[k] === undefined) { return; }
      var input = form.elements[k];
      if (input.tagName === "SELECT" && !Array.prototype.some.call(input.options, function (o) { return o.value === values[k]; })) {
        return;
      }
      input.value = values[k];
    });
    buildInputs(values);
  }

  function setUp() {
    form = document.getElementById("choose-form");
    if (!form) { return; }
    APP = JSON.parse(form.getAttribute("data-app"));
    form.elements.optimizer.value = APP.default_optimizer;
    apply(fromHash() || {});
    form.addEventListener("submit", function (e) { e.preventDefault(); choose(true); });
    form.elements.family.addEventListener("change", function () { buildInputs({}); choose(true); });
    form.elements.optimizer.addEventListener("change", function () { buildInputs(readFormValues()); choose(true); });
    form.elements.device.addEventListener("change", function () { choose(true); });
    window.addEventListener("hashchange", function () {
      var v = fromHash();
      if (v && toHash(readForm()) !== location.hash.slice(1)) { apply(v); choose(false); }
    });
    choose(false);
  }

  function readFormValues() {
    var out = {};
    Array.prototype.forEach.call(form.elements, function (e) {
      if (e.name && e.name.indexOf("p:") === 0) { out[e.name.slice(2)] = e.value; }
    });
    return out;
  }

  document.addEventListener("DOMContentLoaded", setUp);

  // for tests: evaluate a query with the page's models (bytes as strings)
  function evaluate(query) {
    var a = advise(query);
    var big = function (o) {
      return JSON.parse(JSON.stringify(o, function (k, v) { return typeof v === "bigint" ? v.toString() : v; }));
    };
    var row = function (c) {
      return big({label: c.label, knobs: c.knobs, total_peak_bytes: c.total_peak_bytes, need_bytes: c.need_bytes,
                  headroom_bytes: c.headroom_bytes, peak_by_category_bytes: c.peak_by_category_bytes,
                  relative_step_time: c.relative_step_time, chunks: c.chunks});
    };
    var fitRow = function (c) {
      return Object.assign(row(c), {rank: c.rank, time_ranked: c.time_ranked, time_floored: c.time_floored,
                                    chunks_timed: c.chunks_timed, time_band: c.time_band});
    };
    return {fits: a.fits.map(fitRow), pareto: a.pareto.map(row), extrapolation: a.extrapolation,
            cannot_fit: a.cannot_fit.map(function (c) {
              return big({label: c.label, smallest_need_bytes: c.smallest_need_bytes, knobs: c.knobs, chunks: c.chunks});
            }), smallest: a.smallest ? row(a.smallest) : null, budget_bytes: a.budget_bytes.toString(), sizes: a.sizes,
            plain: a.plain ? big(a.plain) : null, not_modelled: a.not_modelled, time_error: a.time_error};
  }

  function predictOne(optimizer, family, label, params, device) {
    var fam = APP.models[optimizer].families[family];
    var entry = fam.entries.filter(function (e) { return e.label === label; })[0];
    var p = predict(fam, entry, params);
    var t = predictTime(fam, entry, params, device || "cpu");
    return {total: p.total.toString(), k: p.k, time: t,
            categories: JSON.parse(JSON.stringify(p.categories, function (k, v) { return typeof v === "bigint" ? v.toString() : v; }))};
  }

  // for tests: the micro-batch answer (bytes as strings), null for a family without a batch
  function evaluateMicro(query) {
    var m = adviseMicro(query);
    if (m === null) { return null; }
    var big = function (o) {
      return JSON.parse(JSON.stringify(o, function (k, v) { return typeof v === "bigint" ? v.toString() : v; }));
    };
    var row = function (c) {
      return big({label: c.label, knobs: c.knobs, size: c.size, micro_batch: c.micro_batch, exact: c.exact,
                  low_bytes: c.low_bytes, high_bytes: c.high_bytes, need_bytes: c.need_bytes,
                  need_low_bytes: c.need_low_bytes, peak_by_category_bytes: c.peak_by_category_bytes,
                  relative_step_time: c.relative_step_time, why: c.why, may_fit_from: c.may_fit_from,
                  rank: c.rank === undefined ? null : c.rank});
    };
    return {answers: m.answers.map(row), unranked: m.unranked.map(row), batch: m.batch,
            cannot_fit: big(m.cannot_fit.map(function (c) {
              return {label: c.label, smallest_need_bytes: c.smallest_need_bytes, at: c.at};
            }))};
  }

  return {evaluate: evaluate, evaluateMicro: evaluateMicro, predict: predictOne, pyFixed: pyFixed,
          knobCandidates: knobCandidates};
})();
