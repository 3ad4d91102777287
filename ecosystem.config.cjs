// PM2: `pm2 start ecosystem.config.cjs` (run `make install` once first).
module.exports = {
  apps: [
    {
      name: "knowledge-api",
      script: "scripts/start-knowledge-api.sh",
      interpreter: "bash",
      cwd: __dirname,
      env: {
        KNOWLEDGE_API_PORT: "3006",
        KNOWLEDGE_API_HOST: "0.0.0.0",
      },
      autorestart: true,
      max_restarts: 10,
      min_uptime: "10s",
      restart_delay: 2000,
      exp_backoff_restart_delay: 200,
      kill_timeout: 10000,
      out_file: "logs/knowledge-api.out.log",
      error_file: "logs/knowledge-api.err.log",
      merge_logs: true,
      time: true,
    },
  ],
};
