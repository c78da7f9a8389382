/**
 * `UsageError`: an error the user can fix by changing the command line or its inputs. `main` prints its
 * message as one line and exits with code 2. This file holds only the error class, so that every command
 * file can throw it without importing the command tree (src/cli/main.ts).
 */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}
