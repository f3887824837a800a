// "Try a text" explanations: each label's words (from /v1/predict's `explain`), highlighted in the text.
// The words are the TF-IDF featuriser's terms: lowercased runs of 2+ word characters (scikit-learn's
// pattern \b\w\w+\b, which models/features.py keeps) and n-grams of them joined by a space; they are found
// again in the text the same way, so only what the model read is marked. Loaded before app.js.
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

  // The text with the label's contributing words in <mark> (class w1..w3: a third of the top contribution each).
  function highlight(container, text, label) {
    const words = (label.explanation && label.explanation.words) || [];
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
      mark.title = `${w.term} +${w.contribution.toFixed(3)}`;
      nodes.push(mark);
      at = t.end;
      marks += 1;
    });
    nodes.push(document.createTextNode(text.slice(at)));
    container.replaceChildren(...nodes);
    container.dataset.label = label.name;
    container.dataset.marks = marks;
  }

  // The cell of the results table: "game +1.712 · shooter +0.620".
  function wordsText(label) {
    const words = (label.explanation && label.explanation.words) || [];
    return words.map((w) => `${w.term} +${w.contribution.toFixed(3)}`).join(" · ") || "–";
  }

  return { highlight, wordsText, tokens };
})();
