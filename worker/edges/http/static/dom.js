// DOM helpers the page's modules share: an element factory, the error line, short forms.

export const $ = (id) => document.getElementById(id);

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

export function short(value, chars = 160) {
  const textForm = typeof value === "string" ? value : JSON.stringify(value);
  const flat = (textForm ?? "").replace(/\s+/g, " ");
  return flat.length > chars ? `${flat.slice(0, chars - 1)}…` : flat;
}

export function time(ts) {
  return new Date(ts * 1000).toLocaleTimeString([], {
    hour: "2-digit", minute: "2-digit", second: "2-digit", fractionalSecondDigits: 1, hour12: false,
  });
}

export function showError(message) {
  const node = $("error");
  node.textContent = message;
  node.hidden = !message;
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
