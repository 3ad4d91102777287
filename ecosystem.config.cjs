// PM2: `pm2 start ecosystem.config.cjs` (run `make install` once first).
//
// Replicas: KNOWLEDGE_API_INSTANCES processes (fork mode: the app is Python) share one
// port through SO_REUSEPORT. `pm2 reload knowledge-api` replaces them one at a time
// (PM2 does 2 at once from 3 processes on; `--parallel 1` keeps it to one): each
// replacement binds the same port and says `ready` once it listens (wait_ready), and
// only then is the next one stopped; a stopped process finishes its in-flight requests
// (SIGINT, within kill_timeout).
//
// Several replicas (here or on more hosts) share one store and, with
// KNOWLEDGE_CACHE=redis, one cache: start PM2 from an environment such as
//   KNOWLEDGE_API_INSTANCES=4 KNOWLEDGE_STORE=postgres KNOWLEDGE_DATABASE_URL=postgresql://...
//   KNOWLEDGE_CACHE=redis KNOWLEDGE_REDIS_URL=redis://:password@cache:6379/0
// (docs/operations.md, "Several replicas"). Every KNOWLEDGE_* variable of that
// environment reaches each process; a write through any of them reaches the answers of
// all of them within a second.
const env = process.env;

module.exports = {
  apps: [
    {
      name: "knowledge-api",
      script: "scripts/start-knowledge-api.sh",
      interpreter: "bash",
      cwd: __dirname,
      exec_mode: "fork",
      instances: Number(env.KNOWLEDGE_API_INSTANCES || 2),
      env: {
        KNOWLEDGE_API_HOST: env.KNOWLEDGE_API_HOST || "0.0.0.0",
        KNOWLEDGE_API_PORT: env.KNOWLEDGE_API_PORT || "3006",
      },
      wait_ready: true,
      // The longest start (model load, store open) before PM2 moves on without `ready`.
      listen_timeout: 60000,
      kill_timeout: 10000,
      autorestart: true,
      max_restarts: 10,
      min_uptime: "10s",
      restart_delay: 2000,
      exp_backoff_restart_delay: 200,
      // Info and below on stdout, warnings and errors on stderr (KNOWLEDGE_LOG_FORMAT).
      out_file: "logs/knowledge-api.out.log",
      error_file: "logs/knowledge-api.err.log",
      merge_logs: true,
      time: true,
    },
  ],
};
