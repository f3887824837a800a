// "Try a text" explanations: each label's words (from /v1/predict's `explain`), highlighted in the text.
// The words are the TF-IDF featuriser's terms: lowercased runs of 2+ word characters (scikit-learn's
// pattern \b\w\w+\b, which models/features/tfidf.py keeps) and n-grams of them joined by a space; they are found
// again in the text the same way, so only what the model read is marked. A LaMP bundle's labels mark their
// attended words instead (words of the text, lowercased: found the same way), the re-ranker's own reason.
// Loaded before app.js.
"use strict";

const XtagExplain = (() => {
  const TOKEN = /[\p{L}\p{N}_]{2,}/gu; // Python's \w is str.isalnum() or "_": letters and numbers

  function tokens(text) {
    return [...text.matchAll(TOKEN)].map((m) => ({ start: m.index, end: m.index + m[0].length, word: m[0].toLowerCase() }));
  }

  // Each token's strongest credited term: a bigram's contribution marks both its words.
  function credit(toks, words) {
    const best = new Array(toks.length).fill(null);
    for (const w of words) {
      const parts = w.term.split(" ");
      for (let i = 0; i + parts.length <= toks.length; i++) {
        if (!parts.every((p, j) => toks[i + j].word === p)) continue;
        for (let j = 0; j < parts.length; j++) {
          if (!best[i + j] || w.contribution > best[i + j].contribution) best[i + j] = w;
        }
      }
    }
    return best;
  }

  // The words to mark, as {term, contribution, shown}: a LaMP label's attended words (weights), else its TF-IDF words.
  function marked(label) {
    const e = label.explanation || {};
    if (e.attended_words) return e.attended_words.map((w) => ({ term: w.term, contribution: w.weight, shown: w.weight.toFixed(3) }));
    return (e.words || []).map((w) => ({ ...w, shown: "+" + w.contribution.toFixed(3) }));
  }

  // The text with the label's contributing words in <mark> (class w1..w3: a third of the top contribution each).
  function highlight(container, text, label) {
    const words = marked(label);
    const toks = tokens(text);
    const best = credit(toks, words);
    const top = Math.max(0, ...words.map((w) => w.contribution));
    const nodes = [];
    let at = 0;
    let marks = 0;
    toks.forEach((t, i) => {
      const w = best[i];
      if (!w) return;
      nodes.push(document.createTextNode(text.slice(at, t.start)));
      const mark = document.createElement("mark");
      mark.textContent = text.slice(t.start, t.end);
      mark.dataset.term = w.term;
      mark.className = "w" + Math.max(1, Math.ceil((3 * w.contribution) / top));
      mark.title = `${w.term} ${w.shown}`;
      nodes.push(mark);
      at = t.end;
      marks += 1;
    });
    nodes.push(document.createTextNode(text.slice(at)));
    container.replaceChildren(...nodes);
    container.dataset.label = label.name;
    container.dataset.marks = marks;
  }

  // The cell of the results table: "game +1.712 · shooter +0.620"; a LaMP label's adds what it attended to
  // and the returned labels it listened to: "… | attended game 0.412 · fps 0.201 | with games::fps 0.310".
  function wordsText(label) {
    const e = label.explanation || {};
    const parts = [];
    if (e.words) parts.push(e.words.map((w) => `${w.term} +${w.contribution.toFixed(3)}`).join(" · ") || "–");
    if (e.attended_words) parts.push("attended " + (e.attended_words.map((w) => `${w.term} ${w.weight.toFixed(3)}`).join(" · ") || "–"));
    if (e.supporting_labels) parts.push("with " + (e.supporting_labels.map((s) => `${s.name} ${s.weight.toFixed(3)}`).join(" · ") || "–"));
    if (e.note) parts.push(`(${e.note})`);
    return parts.join(" | ") || "–";
  }

  return { highlight, wordsText, tokens };
})();
