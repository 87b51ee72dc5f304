(function () {
  var root = document.getElementById("__PVID__");
  if (!root || root.getAttribute("data-ready")) return;
  root.setAttribute("data-ready", "1");
  var D = JSON.parse(document.getElementById("__PVID__-data").textContent);
  var pool = D.pool, unit = D.unit;
  var S = {g: 0, q: "", f: {}, key: null, dir: 1, page: 0, len: D.page_length, open: null};
  function $(s) { return root.querySelector(s); }
  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]; });
  }
  function G() { return D.groups[S.g]; }
  D.groups.forEach(function (g) {  // what the search box matches: id, label, text, gold, the systems' answers
    g.rows.forEach(function (r, i) {
      r._i = i;
      r.search = [r.id, r.label, r.text, r.gold].concat(Object.keys(r.stats).map(function (s) {
        return r.stats[s].shown; })).join(" ").toLowerCase();
    });
  });
  function acc(st) { return st && st.graded ? st.correct / st.graded : null; }
  function anySys(r, g, f) { return g.systems.some(function (s) { return r.stats[s] && f(r.stats[s]); }); }
  // the quick filters: the same rules as polyvox.explore.quick_filter
  var PRED = {
    ab: function (r, g) { var x = acc(r.stats[g.a]), y = acc(r.stats[g.b]);
      return g.a !== g.b && x !== null && y !== null && x > y; },
    ba: function (r, g) { var x = acc(r.stats[g.b]), y = acc(r.stats[g.a]);
      return g.a !== g.b && x !== null && y !== null && x > y; },
    disagree: function (r, g) { var seen = {}, k = 0;
      g.systems.forEach(function (s) { var st = r.stats[s];
        if (st && st.graded) { var key = st.answer === null ? "\u0000" : "=" + st.answer;
          if (!(key in seen)) { seen[key] = 1; k++; } } });
      return k > 1; },
    wrong: function (r, g) { return anySys(r, g, function (st) { return st.graded > st.correct; }); },
    cap: function (r, g) { return anySys(r, g, function (st) { return st.cap > 0; }); },
    invalid: function (r, g) { return anySys(r, g, function (st) { return st.invalid > 0; }); }
  };
  function typeset(el) {
    if (!el) return;
    var P = window.PolyvoxMathJax;  // Jupyter: a private MathJax (explore.init) converts each math span
    if (P && P.startup && P.startup.promise) {
      P.startup.promise.then(function () {
        el.querySelectorAll("span.math").forEach(function (sp) {
          if (sp.getAttribute("data-pv-math") || sp.querySelector("mjx-container, svg")) return;
          var t = sp.textContent.trim(), display = t.slice(0, 2) === "\\[";
          sp.setAttribute("data-pv-math", "1");
          P.tex2svgPromise(t.replace(/^\\[\[(]/, "").replace(/\\[\])]$/, ""), {display: display}).then(function (node) {
            sp.textContent = "";
            sp.appendChild(document.importNode(node, true));
          }).catch(function () {});
        });
      });
      return;
    }
    var MJ = window.MathJax;  // a static page: its MathJax (explore.init's, or the page's own)
    if (MJ && MJ.startup && MJ.startup.promise) {
      MJ.startup.promise.then(function () { if (MJ.typesetPromise) return MJ.typesetPromise([el]); }).catch(function () {});
    } else if (document.readyState !== "complete") {  // a deferred MathJax (Sphinx's) runs before the load event
      window.addEventListener("load", function () { typeset(el); }, {once: true});
    }
  }
  function clearMath(el) {
    var MJ = window.MathJax;
    if (MJ && MJ.typesetClear && el) { try { MJ.typesetClear([el]); } catch (e) {} }
  }
  function cols(g) {
    var c = [{key: "id", title: "problem"}, {key: "gold", title: "gold"}];
    var many = g.rows.some(function (r) { return g.systems.some(function (s) { return r.stats[s] && r.stats[s].n > 1; }); });
    g.systems.forEach(function (s) {
      c.push({key: "c:" + s, title: many ? "correct" : "correct", sys: s});
      c.push({key: "l:" + s, title: (many ? "mean " : "") + unit, sys: s});
    });
    return c;
  }
  function sortVal(r, key) {
    if (key === "id") return r._i;
    if (key === "gold") return r.gold;
    var st = r.stats[key.slice(2)];
    if (!st) return null;
    return key[0] === "c" ? acc(st) : st.length;
  }
  function rowsNow() {
    var g = G(), words = S.q.toLowerCase().split(/\s+/).filter(Boolean);
    var on = Object.keys(S.f).filter(function (k) { return S.f[k]; });
    var rows = g.rows.filter(function (r) {
      return words.every(function (w) { return r.search.indexOf(w) >= 0; }) &&
        on.every(function (k) { return PRED[k](r, g); });
    });
    if (S.key) {
      rows = rows.slice().sort(function (x, y) {
        var a = sortVal(x, S.key), b = sortVal(y, S.key);
        if (a === null && b === null) return x._i - y._i;
        if (a === null) return 1;
        if (b === null) return -1;
        var c = typeof a === "string" ? a.localeCompare(b, undefined, {numeric: true}) : a - b;
        return c ? c * S.dir : x._i - y._i;
      });
    }
    return rows;
  }
  function fmtLen(x) { return Math.round(x).toString(); }
  function cellC(st) {
    if (!st) return "<td>—</td>";
    var top;
    if (!st.graded) top = "<span class='pv-sub'>not graded</span>";
    else if (st.n === 1) top = st.correct ? "<span class='pv-yes'>yes</span>" : "<span class='pv-no'>no</span>";
    else top = "<span class='" + (st.correct * 2 >= st.graded ? "pv-yes" : "pv-no") + "'>" + st.correct + "/" +
      st.graded + "</span>";
    var ans = st.graded ? "<div class='pv-sub'>" + esc(st.shown.length > 28 ? st.shown.slice(0, 27) + "…" : st.shown) +
      "</div>" : "";
    return "<td>" + top + ans + "</td>";
  }
  function cellL(st) {
    if (!st) return "<td class='pv-xnum'>—</td>";
    var flags = [];
    if (st.cap) flags.push(st.n === 1 ? "cap hit" : st.cap + " cap");
    if (st.invalid) flags.push(st.n === 1 ? "bad format" : st.invalid + " bad fmt");
    return "<td class='pv-xnum'>" + fmtLen(st.length) + (flags.length ? "<div class='pv-flag'>" + flags.join(", ") +
      "</div>" : "") + "</td>";
  }
  function sampleLabel(x) {
    var o = x.correct === null ? "not graded" : (x.correct ? "correct" : "wrong");
    // short: a narrow column cuts a long option ("… · inv"); the facts under the selector say it in full
    return "sample " + x.i + " · " + o + " · " + x.length + " " + unit + (x.cap ? " · cap" : "") +
      (x.valid === false ? " · bad format" : "");
  }
  function traceHtml(x) {
    var facts = [x.correct === null ? "not graded" : (x.correct ? "<span class='pv-yes'>correct</span>" :
      "<span class='pv-no'>wrong</span>"), x.length + " " + unit];
    if (x.cap) facts.push("<b>cut at the token cap</b>");
    if (x.valid === false) facts.push("invalid format");
    if (x.correct !== null) facts.push(x.answer === null ? "no answer" : "graded answer <code>" + esc(x.answer) + "</code>");
    var fin = x.final === null ? "<p><i>no final answer</i></p>" : pool[x.final];
    var rea = x.reasoning === null ? "" : "<details class='pv-reasoning' open><summary>Reasoning (" + x.words +
      " words)</summary><div class='pv-md pv-scroll'>" + pool[x.reasoning] + "</div></details>";
    return "<div class='pv-facts'>" + facts.join(" · ") + "</div><div class='pv-final'><i>Final answer</i>" +
      "<div class='pv-md'>" + fin + "</div></div>" + rea;
  }
  function column(side, sys, samples, pos) {
    var n = samples ? samples.length : 0;
    var h = "<div class='pv-col' data-side='" + side + "'><div class='pv-sys'>" + side.toUpperCase() + ": " +
      esc(sys) + " <span class='pv-sub'>· " + n + " sample" + (n === 1 ? "" : "s") + "</span></div>";
    if (!n) return h + "<p>no samples of this problem</p></div>";
    var opts = samples.map(function (x, j) {
      return "<option value='" + j + "'" + (j === pos ? " selected" : "") + ">" + esc(sampleLabel(x)) + "</option>"; });
    return h + "<div class='pv-samplebar'><button type='button' class='pv-btn pv-sprev' title='previous sample'>‹</button>" +
      "<select class='pv-sample' aria-label='sample of " + esc(sys) + "'>" + opts.join("") + "</select>" +
      "<button type='button' class='pv-btn pv-snext' title='next sample'>›</button></div><div class='pv-trace'>" +
      traceHtml(samples[pos]) + "</div></div>";
  }
  function detail(r, g) {
    var tr = g.traces[r.id];
    var head = "<div class='pv-problem'><b>Problem " + esc(r.id) + "</b>" + (r.label ? " · " + esc(r.label) : "") +
      "<div class='pv-md'>" + pool[r.problem] + "</div>" + (r.gold ? "<div><i>Gold:</i> " + esc(r.gold) + "</div>" : "") +
      "</div>";
    if (!tr) return head + "<p><b>Traces not on this page</b>: past the cap of " + D.embedded.cap_mb +
      " MB of rendered traces (see the note above the table).</p>";
    return head + "<div class='pv-pair'>" + column("a", g.a, tr[g.a], S.open.a) + column("b", g.b, tr[g.b], S.open.b) +
      "</div>";
  }
  function defaultPos(g, id) {
    var tr = g.traces[id] || {};
    var nb = (tr[g.b] || []).length;
    return {a: 0, b: g.a === g.b && nb > 1 ? 1 : 0};  // one system: its first two samples side by side
  }
  function render() {
    var g = G(), cs = cols(g);
    var rows = rowsNow(), n = rows.length, per = S.len > 0 ? S.len : Math.max(n, 1);
    var pages = Math.max(1, Math.ceil(n / per));
    if (S.page >= pages) S.page = pages - 1;
    var shown = rows.slice(S.page * per, S.page * per + per);
    // header: problem, gold, then per system its correctness and length
    var h1 = "<tr><th rowspan='2' class='pv-sort' data-key='id'>problem</th><th rowspan='2' class='pv-sort' data-key='gold'>gold</th>";
    g.systems.forEach(function (s) {  // long run names break after / _ - (never inside a word)
      h1 += "<th colspan='2' class='pv-sys-head'>" + esc(s).replace(/([\/_-])/g, "$1<wbr>") + "</th>"; });
    var h2 = "<tr>" + cs.slice(2).map(function (c) {
      return "<th class='pv-sort' data-key='" + esc(c.key) + "'>" + esc(c.title) + "</th>"; }).join("") + "</tr>";
    var thead = $("thead"), tbody = $("tbody");
    thead.innerHTML = h1 + "</tr>" + h2;
    thead.querySelectorAll("th.pv-sort").forEach(function (th) {
      if (th.getAttribute("data-key") === S.key) th.classList.add(S.dir > 0 ? "pv-asc" : "pv-desc"); });
    clearMath(tbody);
    var body = [];
    shown.forEach(function (r) {
      var open = S.open && S.open.id === r.id;
      var c = "<tr class='pv-row" + (open ? " pv-open" : "") + "' data-pid='" + esc(r.id) + "' tabindex='0'>" +
        "<td class='pv-id'>" + esc(r.id) + (r.label ? "<div class='pv-label'>" + esc(r.label) + "</div>" : "") +
        "</td><td>" + esc(r.gold.length > 40 ? r.gold.slice(0, 39) + "…" : r.gold) + "</td>";
      g.systems.forEach(function (s) { c += cellC(r.stats[s]) + cellL(r.stats[s]); });
      c += "</tr><tr class='pv-xtextrow" + (open ? " pv-open" : "") + "' data-pid='" + esc(r.id) + "'><td colspan='" +
        cs.length + "'><div class='pv-fit pv-xtext pv-md'>" + pool[r.problem] + "</div></td></tr>";
      if (open) c += "<tr class='pv-detail' data-pid='" + esc(r.id) + "'><td colspan='" + cs.length +
        "'><div class='pv-fit pv-detail-in'>" + detail(r, g) + "</div></td></tr>";
      body.push(c);
    });
    if (!shown.length) body.push("<tr><td colspan='" + cs.length + "'>No problem matches the search and filters.</td></tr>");
    tbody.innerHTML = body.join("");
    var total = g.rows.length;
    $(".pv-info").textContent = n ? "Showing " + (S.page * per + 1) + " to " + (S.page * per + shown.length) + " of " +
      n + (n === 1 ? " problem" : " problems") + (n < total ? " (filtered from " + total + ")" : "") :
      "0 of " + total + (total === 1 ? " problem" : " problems");
    $(".pv-page").textContent = "page " + (S.page + 1) + " of " + pages;
    $(".pv-prev").disabled = S.page === 0;
    $(".pv-next").disabled = S.page >= pages - 1;
    counts();
    fit();
    typeset(tbody);
    markCut(tbody);
    setTimeout(function () { markCut(tbody); }, 800);  // again once the maths is typeset (heights change)
  }
  // a problem preview longer than its three lines fades out at the bottom (class pv-cut): the opened row shows it all
  function markCut(el) {
    el.querySelectorAll(".pv-xtext").forEach(function (box) {
      var cut = box.scrollHeight > box.clientHeight + 2;
      box.classList.toggle("pv-cut", cut);
      if (cut) box.title = "The problem continues: open the row to read it all";
      else box.removeAttribute("title");
    });
  }
  function counts() {
    var g = G();
    root.querySelectorAll(".pv-filter").forEach(function (b) {
      var k = b.getAttribute("data-filter");
      var c = g.rows.filter(function (r) { return PRED[k](r, g); }).length;
      b.querySelector(".pv-count").textContent = "(" + c + ")";
      var needsPair = (k === "ab" || k === "ba") && g.a === g.b;
      var needsTwo = k === "disagree" && g.systems.length < 2;
      b.disabled = needsPair || needsTwo;
      if (b.disabled) { S.f[k] = false; b.title = needsPair ? "needs two different systems as A and B" :
        "needs two systems"; }
      b.setAttribute("aria-pressed", S.f[k] ? "true" : "false");
    });
  }
  function fit() {
    var box = $(".pv-scrollx");
    if (box) root.style.setProperty("--pv-w", box.clientWidth + "px");
  }
  function setSystems() {
    var g = G();
    ["a", "b"].forEach(function (side) {
      var sel = $(".pv-" + side);
      sel.innerHTML = g.systems.map(function (s) {
        return "<option" + (s === g[side] ? " selected" : "") + ">" + esc(s) + "</option>"; }).join("");
    });
  }
  function redrawTrace(col) {
    var g = G(), side = col.getAttribute("data-side"), tr = g.traces[S.open.id];
    var box = col.querySelector(".pv-trace");
    clearMath(box);
    box.innerHTML = traceHtml(tr[g[side]][S.open[side]]);
    col.querySelector(".pv-sample").value = String(S.open[side]);
    typeset(box);
  }
  // events
  var timer = null;
  $(".pv-search").addEventListener("input", function (ev) {
    clearTimeout(timer);
    timer = setTimeout(function () { S.q = ev.target.value; S.page = 0; render(); }, 120);
  });
  $(".pv-len").addEventListener("change", function (ev) { S.len = parseInt(ev.target.value, 10); S.page = 0; render(); });
  var grp = $(".pv-bench");
  if (grp) grp.addEventListener("change", function (ev) {
    S.g = parseInt(ev.target.value, 10); S.page = 0; S.key = null; S.open = null; setSystems(); render(); });
  ["a", "b"].forEach(function (side) {
    $(".pv-" + side).addEventListener("change", function (ev) {
      G()[side] = ev.target.value;
      if (S.open) { var p = defaultPos(G(), S.open.id); S.open.a = p.a; S.open.b = p.b; }
      render();
    });
  });
  root.querySelectorAll(".pv-filter").forEach(function (b) {
    b.addEventListener("click", function () { var k = b.getAttribute("data-filter"); S.f[k] = !S.f[k]; S.page = 0; render(); });
  });
  $(".pv-clear").addEventListener("click", function () { S.f = {}; S.page = 0; render(); });
  $(".pv-prev").addEventListener("click", function () { if (S.page > 0) { S.page--; render(); } });
  $(".pv-next").addEventListener("click", function () { S.page++; render(); });
  $("thead").addEventListener("click", function (ev) {
    var th = ev.target.closest("th.pv-sort");
    if (!th) return;
    var k = th.getAttribute("data-key");
    if (S.key === k) S.dir = -S.dir; else { S.key = k; S.dir = k === "id" || k === "gold" ? 1 : -1; }
    render();
  });
  function toggle(id) {
    if (S.open && S.open.id === id) S.open = null;
    else { var p = defaultPos(G(), id); S.open = {id: id, a: p.a, b: p.b}; }
    render();
  }
  var tbody = $("tbody");
  tbody.addEventListener("click", function (ev) {
    var col = ev.target.closest(".pv-col");
    if (col && ev.target.closest(".pv-sprev, .pv-snext")) {
      var side = col.getAttribute("data-side"), n = G().traces[S.open.id][G()[side]].length;
      S.open[side] = (S.open[side] + (ev.target.closest(".pv-snext") ? 1 : n - 1)) % n;
      redrawTrace(col);
      return;
    }
    if (ev.target.closest("tr.pv-detail")) return;
    var tr = ev.target.closest("tr.pv-row, tr.pv-xtextrow");
    if (tr) toggle(tr.getAttribute("data-pid"));
  });
  tbody.addEventListener("change", function (ev) {
    if (!ev.target.classList.contains("pv-sample")) return;
    var col = ev.target.closest(".pv-col");
    S.open[col.getAttribute("data-side")] = parseInt(ev.target.value, 10);
    redrawTrace(col);
  });
  tbody.addEventListener("keydown", function (ev) {
    var tr = ev.target.closest && ev.target.closest("tr.pv-row");
    if (tr && (ev.key === "Enter" || ev.key === " ")) { ev.preventDefault(); toggle(tr.getAttribute("data-pid")); }
  });
  function refit() { fit(); markCut(tbody); }  // a new width rewraps the previews: mark them again
  if (window.ResizeObserver) new ResizeObserver(refit).observe($(".pv-scrollx"));
  else window.addEventListener("resize", refit);
  render();
})();
