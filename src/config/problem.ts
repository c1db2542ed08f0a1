/** One thing wrong with a config file, located by its key path (`routes[2].upstream`). */
export interface ConfigProblem {
  path: string;
  message: string;
  line?: number;
}
