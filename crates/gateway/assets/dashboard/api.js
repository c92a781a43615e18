// Talks to the gateway: same origin, the auth cookie (or no auth on loopback) goes along.

/** An error the gateway answered, with its message. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function answer(r) {
  const text = await r.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (!r.ok) {
    const message = body?.error?.message ?? `${r.status} ${r.statusText}`;
    throw new ApiError(r.status, message);
  }
  return body;
}

/** GET `path` with `params` as the query string. */
export async function get(path, params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const url = q.toString() ? `${path}?${q}` : path;
  return answer(await fetch(url, { headers: { accept: 'application/json' } }));
}

/** POST `body` as JSON to `path`. */
export async function post(path, body) {
  return answer(
    await fetch(path, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify(body),
    }),
  );
}
