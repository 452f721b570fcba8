/** A listener for one event's payload. */
export type Listener<T> = (value: T) => void;

/**
 * A tiny typed event emitter (no dependency on Node's `events`, so the
 * same code runs in browsers). A listener that throws does not break the
 * client's state machine: the exception is rethrown on a later task, where
 * the host reports it as uncaught.
 */
export class Emitter<Events extends object> {
  private readonly listeners = new Map<keyof Events, Set<Listener<never>>>();

  /** Calls `fn` for every `event` until [`off`](#off). */
  on<K extends keyof Events>(event: K, fn: Listener<Events[K]>): this {
    let set = this.listeners.get(event);
    if (!set) {
      set = new Set();
      this.listeners.set(event, set);
    }
    set.add(fn as Listener<never>);
    return this;
  }

  /** Removes a listener added with `on` or `once`. */
  off<K extends keyof Events>(event: K, fn: Listener<Events[K]>): this {
    this.listeners.get(event)?.delete(fn as Listener<never>);
    return this;
  }

  /** Calls `fn` for the next `event` only. */
  once<K extends keyof Events>(event: K, fn: Listener<Events[K]>): this {
    const wrapped: Listener<Events[K]> = (v) => {
      this.off(event, wrapped);
      fn(v);
    };
    return this.on(event, wrapped);
  }

  /** Resolves with the next `event`'s payload. */
  next<K extends keyof Events>(event: K): Promise<Events[K]> {
    return new Promise((resolve) => this.once(event, resolve));
  }

  protected emit<K extends keyof Events>(event: K, value: Events[K]): void {
    const set = this.listeners.get(event);
    if (!set) return;
    for (const fn of [...set]) {
      try {
        (fn as Listener<Events[K]>)(value);
      } catch (e) {
        setTimeout(() => {
          throw e;
        }, 0);
      }
    }
  }
}
