// Guild's shapes of what the server returns. The server keeps a parent's children in
// `children:<stage>:jobs` as bare child ids; Guild kept there the children's hash keys,
// `job:<child id>`, and code written for Guild strips that `job:` before calling getJobs
// with them, so it is put back wherever a worker or a reader sees the field unresolved.

/** Whether `key` names the list of a parent's children. */
const isChildrenJobs = (key, value) => key.startsWith("children:") && key.endsWith(":jobs") && Array.isArray(value);

/** A child as Guild shows it: its hash key (`job:<id>`) when not resolved, else the job. */
const guildChild = (child) => {
  if (typeof child === "string") return `job:${child}`;
  return child && typeof child === "object" && "fields" in child ? toGuildJob(child) : child;
};

/** Fields with every `children:<stage>:jobs` list in Guild's shape. */
function guildFields(fields, out) {
  for (const [key, value] of Object.entries(fields ?? {})) {
    out[key] = isChildrenJobs(key, value) ? value.map(guildChild) : value;
  }
  return out;
}

/** The server's job object in Guild's shape: the job state's fields plus `id`, with
 * resolved children turned the same way and unresolved ones as `job:<id>` keys. */
export const toGuildJob = (job) => guildFields(job.fields, { id: job.id });

/** A worker function's input (`{id, ...attributesToGet, retries, ...}`) in Guild's shape;
 * the same object when it holds no children (most stages: no copy per job). */
export function toGuildInput(input) {
  for (const key in input) {
    if (isChildrenJobs(key, input[key])) return guildFields(input, {});
  }
  return input;
}
