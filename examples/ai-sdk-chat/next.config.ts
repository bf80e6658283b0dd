import type { NextConfig } from "next";

const config: NextConfig = {
  // next dev writes no AGENTS.md into the example
  agentRules: false,
  experimental: { agentUpgrade: false },
};

export default config;
