/**
 * RecordEpisodeStatistics: at the step that ends an episode (terminated or truncated), adds
 * `info.episode = { r, l, t }`: the summed reward, the number of steps and the wall-clock seconds
 * since reset. It also keeps the last `historySize` finished episodes in `returnQueue`, `lengthQueue`
 * and `timeQueue`. It changes nothing else.
 */
import type { Env, ResetArgs, ResetResult, StepResult } from "../env.js";
import { Wrapper } from "./wrapper.js";

export interface EpisodeStatistics {
  /** Summed reward of the episode. */
  r: number;
  /** Episode length in steps. */
  l: number;
  /** Wall-clock seconds from reset to the end. */
  t: number;
}

export class RecordEpisodeStatistics<Obs = unknown, Act = unknown> extends Wrapper<Obs, Act> {
  readonly wrapperName = "RecordEpisodeStatistics";
  readonly returnQueue: number[] = [];
  readonly lengthQueue: number[] = [];
  readonly timeQueue: number[] = [];
  private episodeReturn = 0;
  private episodeLength = 0;
  private startedAt = 0;

  constructor(
    env: Env<Obs, Act>,
    readonly historySize = 100,
  ) {
    super(env);
  }

  async reset(args?: ResetArgs): Promise<ResetResult<Obs>> {
    const result = await this.env.reset(args);
    this.episodeReturn = 0;
    this.episodeLength = 0;
    this.startedAt = performance.now();
    return result;
  }

  async step(action: Act): Promise<StepResult<Obs>> {
    const [obs, reward, terminated, truncated, info] = await this.env.step(action);
    this.episodeReturn += reward;
    this.episodeLength++;
    if (!terminated && !truncated) return [obs, reward, terminated, truncated, info];
    const episode: EpisodeStatistics = {
      r: this.episodeReturn,
      l: this.episodeLength,
      t: Math.round(performance.now() - this.startedAt) / 1000,
    };
    push(this.returnQueue, episode.r, this.historySize);
    push(this.lengthQueue, episode.l, this.historySize);
    push(this.timeQueue, episode.t, this.historySize);
    return [obs, reward, terminated, truncated, { ...info, episode }];
  }
}

function push(queue: number[], value: number, max: number): void {
  queue.push(value);
  if (queue.length > max) queue.shift();
}
