// The playground: one streamed query (POST /v1/knowledge/query, stream: true) per
// question. Its events: `results`, `synthesis` deltas (`reset` drops the text so far),
// then `done` with the whole synthesis and the metrics, or `error` in the error shape.
// Another page of results is the same query with an `offset` and no synthesis; the
// answer and its citations stay those of the first page. The query asks for offsets in
// UTF-16 code units, the unit of JavaScript's strings: a citation's spans slice the
// passage and the document (GET /v1/knowledge/documents/{id}) as they are here.
// Text from the service only ever reaches the page as text nodes, never as HTML.

const QUERY = "/v1/knowledge/query";
const DOCUMENTS = "/v1/knowledge/documents/";
const FEEDBACK = "/v1/knowledge/feedback";
const KEY = "knowledge-api-key";
const $ = (id) => document.getElementById(id);
const form = $("ask");
const question = $("question");
const filters = $("filters");
const apiKey = $("api-key");
const answer = $("answer");
let asked = null; // the body of the question shown
let answered = { results: [], next: null }; // its first page: what the answer's [n] cite
let citations = []; // the `done` event's: the words behind each [n], in the answer's order
let shown = { offset: 0, ...answered }; // the page on screen; `next`: the next page's offset
let running = null;
let paging = null;
let queryId = null;

apiKey.value = sessionStorage.getItem(KEY) ?? "";
apiKey.addEventListener("input", () => {
  const key = apiKey.value.trim();
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
});

question.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    form.requestSubmit();
  }
});

form.addEventListener("submit", (event) => {
  event.preventDefault();
  const body = requestBody();
  if (body) ask(body);
});

filters.addEventListener("input", () => showFilterError(null));

// Thumbs: the answer's rating, sent with its query_id (POST /v1/knowledge/feedback).
$("rate").addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-rating]");
  if (!button || !queryId) return;
  const body = { query_id: queryId, rating: button.dataset.rating };
  const response = await fetch(FEEDBACK, { method: "POST", headers: headers(), body: JSON.stringify(body) });
  for (const each of $("rate").querySelectorAll("button")) each.setAttribute("aria-pressed", String(each === button && response.ok));
  $("rated").textContent = response.ok ? "Thanks: rating sent." : await failure(response);
});

$("previous").addEventListener("click", () => turnPage(Math.max(0, shown.offset - asked.limit)));
$("next").addEventListener("click", () => turnPage(shown.next));

// A counted value narrows the question to it: an equality in the filter box, asked again.
$("facet-groups").addEventListener("click", (event) => {
  const button = event.target.closest("button[data-field]");
  if (!button) return;
  const where = filterObject();
  if (where === null) return;
  const value = countedValue(button.dataset.value);
  filters.value = JSON.stringify({ ...where, [button.dataset.field]: value });
  form.requestSubmit();
});

/** What matches the passages counted under `text`: counts key a number or boolean by its
 * JSON text, so "3" stands for the number 3 and the string "3" alike. */
function countedValue(text) {
  if (!/^(?:-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false)$/.test(text)) return text;
  return { $in: [text, JSON.parse(text)] };
}

answer.addEventListener("click", (event) => {
  const link = event.target.closest("a.cite");
  if (!link) return;
  event.preventDefault();
  showSource(Number(link.dataset.n), citations[Number(link.dataset.k)]);
});

// A source's "in its document" link: the document's text, every cited span of it marked.
$("results").addEventListener("click", (event) => {
  const link = event.target.closest("a.open-document");
  if (!link) return;
  event.preventDefault();
  showDocument(link.dataset.document, Number(link.dataset.k));
});

$("document-close").addEventListener("click", (event) => {
  event.preventDefault();
  $("document-view").hidden = true;
});

/** The query as the form sets it: no `sources` when no type is checked (all types), no
 * `filters` when the box is empty; null (and the reason next to the box) when the box
 * holds no JSON object. */
function requestBody() {
  const where = filterObject();
  if (where === null) return null;
  const body = { query: question.value.trim(), stream: true, offsets: "utf16" };
  if (where) body.filters = where;
  const sources = [...form.querySelectorAll("input[name=sources]:checked")].map((c) => c.value);
  if (sources.length) body.sources = sources;
  const collection = $("collection").value.trim();
  if (collection) body.collection = collection;
  const limit = $("limit").valueAsNumber;
  body.limit = Number.isFinite(limit) ? limit : 5;
  const facets = $("facets").value.split(",").map((f) => f.trim()).filter(Boolean);
  if (facets.length) body.facets = facets;
  return body;
}

/** The filter box's JSON object; undefined when the box is empty, null when it holds
 * something else (said next to the box). The service checks the language itself. */
function filterObject() {
  const text = filters.value.trim();
  if (!text) return undefined;
  let value;
  try {
    value = JSON.parse(text);
  } catch (error) {
    showFilterError({ field: "filters", rule: `not JSON: ${error.message}` });
    return null;
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    const rule = 'must be a JSON object of fields and operators, e.g. {"source_type": "wiki"}';
    showFilterError({ field: "filters", rule });
    return null;
  }
  return value;
}

function headers(accept = "text/event-stream") {
  const found = { "Content-Type": "application/json", Accept: accept };
  const key = apiKey.value.trim();
  if (key) found.Authorization = `Bearer ${key}`;
  return found;
}

async function ask(body) {
  running?.abort();
  paging?.abort();
  const controller = new AbortController();
  running = controller;
  asked = body;
  clear();
  busy(true);
  try {
    const response = await sent(body, controller);
    if (!response) return;
    let text = "";
    for await (const [name, data] of serverSentEvents(response)) {
      if (data.facets) showFacets(data.facets);
      if (name === "results") showResults(data.results);
      else if (name === "synthesis") showAnswer((text += data.delta));
      else if (name === "reset") showAnswer((text = ""));
      else if (name === "done") finish(data);
      else if (name === "error") showError(described(data, "the stream failed"));
    }
  } catch (error) {
    unreachable(error);
  } finally {
    if (running === controller) busy(false);
  }
}

/** Another page of the question's results (`offset`), without a synthesis; the first
 * page is the one the answer came with. An answer still streaming goes on. */
async function turnPage(offset) {
  paging?.abort();
  if (offset === 0) return showPage(0, answered);
  const controller = new AbortController();
  paging = controller;
  const body = { ...asked, offset, synthesize: false, stream: false };
  delete body.facets; // the same on every page
  try {
    const response = await sent(body, controller);
    if (!response) return;
    const page = await response.json();
    showPage(offset, { results: page.results, next: page.next_offset });
  } catch (error) {
    unreachable(error);
  }
}

/** The response to a query; null when it was refused (and the refusal is shown). */
async function sent(body, controller) {
  const response = await fetch(QUERY, {
    method: "POST",
    headers: headers(body.stream ? "text/event-stream" : "application/json"),
    body: JSON.stringify(body),
    signal: controller.signal,
  });
  if (response.ok) return response;
  const refusal = await errorBody(response);
  const details = refusal?.error?.details;
  if (response.status === 400 && /^filters\b/.test(details?.field ?? "")) {
    showFilterError({ ...details, status: response.status });
  } else {
    showError(failureText(refusal, response));
  }
  return null;
}

function unreachable(error) {
  if (error.name !== "AbortError") {
    showError(`The service could not be reached (${error.message}). Is it running?`);
  }
}

/** Events as the SSE format frames them: `event:` and `data:` lines up to a blank line. */
async function* serverSentEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffered += value.replaceAll("\r\n", "\n");
    let end;
    while ((end = buffered.indexOf("\n\n")) >= 0) {
      const frame = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      let name = "message";
      const data = [];
      for (const line of frame.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
      }
      if (data.length) yield [name, JSON.parse(data.join("\n"))];
    }
  }
}

/** A readable line for a refused request, from the one error shape when it has it. */
async function failure(response) {
  return failureText(await errorBody(response), response);
}

async function errorBody(response) {
  try {
    return await response.json();
  } catch {
    return null; // not the error shape (a proxy's page, say): the status line says enough
  }
}

function failureText(body, response) {
  let text = described(body, `${response.status} ${response.statusText}`, response.status);
  if (response.status === 401) text += "\nEnter an API key in the API key field and ask again.";
  if (response.status === 403) text += "\nThis key may not do that: check its scopes and collections.";
  return text;
}

function described(body, fallback, status) {
  const error = body?.error;
  if (!error) return fallback;
  const head = status ? `${status} ${error.type}` : error.type;
  const id = error.details?.request_id;
  return `${head}: ${error.message}${id ? ` (request id ${id})` : ""}`;
}

function clear() {
  answered = { results: [], next: null };
  citations = [];
  $("document-view").hidden = true;
  shown = { offset: 0, ...answered };
  $("pages").hidden = true;
  $("counts").hidden = true;
  $("facet-groups").replaceChildren();
  showFilterError(null);
  $("error").hidden = true;
  $("error").textContent = "";
  $("results").replaceChildren();
  $("no-results").hidden = true;
  $("badges").replaceChildren();
  $("warnings").replaceChildren();
  answer.replaceChildren();
  queryId = null;
  $("rate").hidden = true;
  $("rated").textContent = "";
  for (const each of $("rate").querySelectorAll("button")) each.setAttribute("aria-pressed", "false");
}

/** While an answer streams; asking again meanwhile cancels it. */
function busy(on) {
  answer.setAttribute("aria-busy", String(on));
}

function showError(text) {
  $("error").textContent = text;
  $("error").hidden = false;
}

/** A refused filter next to its box: the path inside the filter, then the rule (and for a
 * backend's refusal, the operator and backend it names). Null clears it. */
function showFilterError(details) {
  const box = $("filters-error");
  filters.setAttribute("aria-invalid", String(Boolean(details)));
  box.hidden = !details;
  if (!details) return box.replaceChildren();
  const parts = [element("code", "path", details.field), `: ${details.rule}`];
  if (details.status) parts.unshift(`${details.status} `);
  if (details.request_id) parts.push(` (request id ${details.request_id})`);
  box.replaceChildren(...parts);
}

function showResults(found) {
  answered = { results: found, next: null }; // the `done` event says where the next starts
  showPage(0, answered);
}

/** A page of results, numbered by rank. */
function showPage(offset, page) {
  shown = { offset, ...page };
  const found = page.results;
  $("no-results").hidden = found.length > 0 || offset > 0;
  $("results").replaceChildren(...found.map((result, index) => resultItem(result, offset + index + 1)));
  showPager();
}

/** Previous while past the first page, Next while the service names a next one
 * (`next_offset`: none after the last result, nor past the largest offset it takes). */
function showPager() {
  const { offset, results: found, next } = shown;
  $("pages").hidden = offset === 0 && next == null;
  $("previous").disabled = offset === 0;
  $("next").disabled = next == null;
  $("page-range").textContent = found.length
    ? `Results ${offset + 1}-${offset + found.length}`
    : `No results after ${offset}`;
}

/** The counts of the matching passages per value of each field asked for; each value a
 * button that narrows the question to it. */
function showFacets(facets) {
  const groups = Object.entries(facets).map(([field, counts]) => {
    const group = element("div", "facet-group", "");
    const values = Object.entries(counts).map(([value, count]) => {
      const button = element("button", "facet", `${value} (${count})`);
      button.type = "button";
      button.dataset.field = field;
      button.dataset.value = value;
      button.setAttribute("aria-label", `${field} ${value}: ${count} passages; filter by it`);
      return element("li", "", "", button);
    });
    group.append(element("h3", "", field), element("ul", "facet-values", "", ...values));
    return group;
  });
  $("facet-groups").replaceChildren(...groups);
  $("counts").hidden = groups.length === 0;
}

function resultItem(result, n) {
  const item = element("li", "", "");
  item.id = `result-${n}`;
  item.dataset.id = result.id;
  item.tabIndex = -1;
  const head = element("div", "result-head", "");
  head.append(
    element("span", "number", `[${n}]`),
    element("span", "badge source-type", result.source_type),
    element("span", "title", result.metadata.title || result.source_id),
  );
  if (result.metadata.section) head.append(element("span", "section", result.metadata.section));
  head.append(element("span", "similarity", `similarity ${result.similarity.toFixed(2)}`));
  item.append(head, element("div", "source-id", result.source_id));
  item.append(element("p", "content", result.content));
  return item;
}

/** The answer with each `[n]` of an existing result as a link to it; the k-th link is
 * the k-th citation (the service lists one per marker, in the answer's order). */
function showAnswer(text) {
  const parts = text.split(/(\[\d+\])/);
  let k = 0;
  answer.replaceChildren(
    ...parts.map((part) => {
      const n = Number(part.slice(1, -1));
      if (!/^\[\d+\]$/.test(part) || n < 1 || n > answered.results.length) return part;
      const link = element("a", "cite", part);
      link.href = `#result-${n}`;
      link.dataset.n = String(n);
      link.dataset.k = String(k++);
      link.setAttribute("aria-label", `source ${n}: ${answered.results[n - 1].metadata.title ?? ""}`);
      return link;
    }),
  );
}

function showSource(n, citation) {
  if (shown.offset > 0) showPage(0, answered); // the answer cites its first page
  const item = $(`result-${n}`);
  if (!item) return;
  showQuote(item, answered.results[n - 1], citation);
  for (const other of document.querySelectorAll(".results > li.highlighted")) {
    other.classList.remove("highlighted");
  }
  item.classList.add("highlighted");
  const still = matchMedia("(prefers-reduced-motion: reduce)").matches;
  item.scrollIntoView({ behavior: still ? "auto" : "smooth", block: "center" });
  item.focus({ preventScroll: true });
}

/** The passage with the cited quote marked, and a link to it in its document; an
 * unsupported citation says so instead. */
function showQuote(item, result, citation) {
  const content = item.querySelector(".content");
  item.querySelector(".quote-note")?.remove();
  if (!citation || citation.n !== Number(item.id.slice(7))) return;
  if (!citation.passage) {
    content.replaceChildren(result.content);
    item.append(element("p", "quote-note help", "No sentence of this source was found to support the cited sentence."));
    return;
  }
  const { start, end } = citation.passage;
  const text = result.content;
  content.replaceChildren(text.slice(0, start), element("mark", "quote", text.slice(start, end)), text.slice(end));
  const link = element("a", "open-document", "Show it in its document");
  link.href = `#document-${citation.document_id}`;
  link.dataset.document = citation.document_id;
  link.dataset.k = String(citations.indexOf(citation));
  item.append(element("p", "quote-note", "", link));
}

/** The document's stored text with every span the answer cites in it marked, the one
 * chosen (`k`, its citation's place in the list) scrolled into view. */
async function showDocument(id, k) {
  const response = await fetch(DOCUMENTS + encodeURIComponent(id) + "?offsets=utf16", { headers: headers("application/json") });
  if (!response.ok) return showError(await failure(response));
  const doc = await response.json();
  const text = doc.content;
  const marked = citations
    .map((citation, index) => ({ citation, index }))
    .filter(({ citation }) => citation.document_id === id && citation.document)
    .sort((a, b) => a.citation.document.start - b.citation.document.start);
  const parts = [];
  let at = 0;
  for (const { citation, index } of marked) {
    const { start, end } = citation.document;
    if (start < at) continue; // overlapping an earlier span: it is marked already
    parts.push(text.slice(at, start));
    const mark = element("mark", index === k ? "current" : "", text.slice(start, end));
    mark.id = `cited-${index}`;
    mark.title = `cited as [${citation.n}]`;
    parts.push(mark);
    at = end;
  }
  parts.push(text.slice(at));
  $("document-title").textContent = doc.title || doc.source_id;
  $("document-text").replaceChildren(...parts);
  $("document-view").hidden = false;
  const chosen = $(`cited-${k}`) ?? $("document-text").querySelector("mark");
  const still = matchMedia("(prefers-reduced-motion: reduce)").matches;
  $("document-view").scrollIntoView({ behavior: "auto", block: "start" });
  chosen?.scrollIntoView({ behavior: still ? "auto" : "smooth", block: "center" });
}

function finish(done) {
  citations = done.citations ?? [];
  answered.next = done.next_offset ?? null;
  if (shown.offset === 0) {
    shown.next = answered.next;
    showPager();
  }
  if (done.synthesis !== undefined) showAnswer(done.synthesis);
  queryId = done.query_id ?? null;
  $("rate").hidden = !queryId;
  const metrics = done.metrics ?? {};
  const badges = [
    metrics.cache_hit ? ["cache hit", "hit"] : ["computed", ""],
    [`total ${ms(metrics.total_ms)}`, ""],
  ];
  for (const stage of ["embedding", "search", "rerank", "synthesis"]) {
    const took = metrics[`${stage}_ms`];
    if (took !== undefined && !metrics.cache_hit) badges.push([`${stage} ${ms(took)}`, ""]);
  }
  if (done.synthesizer?.provider) badges.push([`by ${done.synthesizer.provider}`, ""]);
  $("badges").replaceChildren(...badges.map(([text, kind]) => element("li", kind, text)));
  $("warnings").replaceChildren(...(done.warnings ?? []).map((w) => element("li", "", w)));
}

function ms(value) {
  return `${Number(value ?? 0).toFixed(1)} ms`;
}

function element(tag, className, text, ...children) {
  const found = document.createElement(tag);
  if (className) found.className = className;
  if (text) found.textContent = text;
  found.append(...children);
  return found;
}
