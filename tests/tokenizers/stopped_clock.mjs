// Renders with the clock stopped at noon, local time, of a day ("YYYY-MM-DD"): templates read
// the date through strftime_now, which @huggingface/jinja defines as its own global (a context
// variable cannot replace it) reading the clock with `new Date()`.
export function onDay(day, render) {
  const RealDate = globalThis.Date;
  const [y, m, d] = day.split("-").map(Number);
  const noon = new RealDate(y, m - 1, d, 12).getTime();
  globalThis.Date = class extends RealDate {
    constructor(...args) {
      super(...(args.length ? args : [noon]));
    }
  };
  try {
    return render();
  } finally {
    globalThis.Date = RealDate;
  }
}
