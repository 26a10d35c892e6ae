// Guild's four built-in flows (HEAD 7203e96), as jobyard flow definitions. Stage names,
// routing, priorities, retries, children, limiters and the fields each worker gets are
// Guild's; `flowName`, `priority` and `correlationId` (and `delay` on delayable stages, the
// limiter's group key) are added by the server, as Guild's library added them.
//
// `access-check` and `manage-reward` are shared by `access` and `status-update`: the same
// queue, routed per flow. Guild's `discord` reward child went to a Postgres River table;
// here it is an ordinary child stage (`manage-reward:discord`) that a worker serves.

const HOUR = 3600;

const stage = (name, get, extra = {}) => ({ name, attributesToGet: get, delayable: false, ...extra });

const accessCheckChildren = () => {
  const get = ["userId", "guildId", "roleId", "requirementId", "flowId"];
  return [
    stage("requirement", get, { priorities: 2 }),
    stage("gate2", [...get, "gateRiverJobId"], { priorities: 2 }),
    stage("galxe", get, { priorities: 2 }),
    stage("covalent", get, { priorities: 2, delayable: true, limiter: { reservoir: 30, intervalMs: 1000 } }),
    stage("farcaster", get, { priorities: 2 }),
    stage("eas", get, { priorities: 2, delayable: true, limiter: { reservoir: 10, intervalMs: 1000 } }),
    stage("guild", get, { priorities: 2, maxRetries: 1 }),
  ];
};

const accessCheck = (next, priorityDiff) => ({
  ...stage("access-check", ["userId", "guildId", "roleIds", "requirementIds"], {
    priorities: 2,
    maxRetries: 10,
    children: accessCheckChildren(),
  }),
  next,
  ...(priorityDiff ? { priorityDiff } : {}),
});

const manageRewardChildren = () => {
  const get = ["manageRewardAction", "dataForAuditLog"];
  return [
    stage("discord", [...get, "platformGuildId"], {
      priorities: 2,
      delayable: true,
      limiter: { reservoir: 5, intervalMs: 5000, groupJobKey: "platformGuildId" },
    }),
    stage("telegram", get, { priorities: 2 }),
    stage("github", get, { priorities: 2 }),
    stage("google", get, { priorities: 2 }),
    stage("nft", get, { priorities: 2 }),
  ];
};

const manageReward = (next, priorityDiff) => ({
  ...stage("manage-reward", ["children:manage-reward:params", "children:manage-reward:jobs"], {
    priorities: 2,
    maxRetries: 10,
    children: manageRewardChildren(),
  }),
  next,
  ...(priorityDiff ? { priorityDiff } : {}),
});

/** Guild's `access` flow. */
export const access = () => ({
  name: "access",
  lookupAttributes: ["userId", "roleIds", "guildId"],
  retentionSec: 3 * HOUR,
  stages: [
    stage("access-preparation", ["userId", "guildId", "roleIds", "recheckAccess", "saveClaimData"]),
    accessCheck("access-logic"),
    stage("access-logic", [
      "userId", "guildId", "roleIds", "children:access-check:jobs", "roleAccesses",
      "updateMemberships", "manageRewards", "shareSocials", "rootAuditLogId",
    ]),
    stage("prepare-manage-reward", [
      "userId", "guildId", "roleIds", "updateMembershipResult", "forceRewardActions",
      "onlyForThisPlatform", "rootAuditLogId",
    ], { next: "manage-reward" }),
    manageReward("access-result"),
    stage("access-result", ["userId", "guildId", "roleIds"]),
  ],
});

/** Guild's `status-update` flow. */
export const statusUpdate = () => ({
  name: "status-update",
  lookupAttributes: ["roleIds", "guildId"],
  retentionSec: 24 * HOUR,
  stages: [
    stage("status-update-preparation", ["userIds", "guildId", "roleIds", "recheckAccess"], { maxRetries: 1 }),
    stage("bulk-access-check", ["userIds", "guildId", "roleIds"], {
      next: "access-check",
      priorityDiff: 1,
      maxRetries: 10,
      children: [stage("requirement", ["userIds", "requirementId"])],
    }),
    accessCheck("bulk-access-logic", -1),
    stage("bulk-access-logic", [
      "userIds", "guildId", "roleIds", "children:access-check:jobs", "children:bulk-access-check:jobs",
      "updateMemberships", "existingAccesses",
    ], { maxRetries: 1 }),
    stage("bulk-update-membership", ["userIds", "guildId", "roleIds", "userRoleAccesses", "manageRewards"], {
      maxRetries: 1,
    }),
    stage("bulk-prepare-manage-reward", [
      "userIds", "guildId", "roleIds", "bulkUpdateMembershipResult", "forceRewardActions", "onlyForThisPlatform",
    ], { next: "manage-reward", priorityDiff: 1, maxRetries: 1 }),
    manageReward("status-update-result", -1),
    stage("status-update-result", ["userIds", "guildId", "roleIds"], { maxRetries: 1 }),
  ],
});

/** Guild's `messaging` flow. */
export const messaging = () => ({
  name: "messaging",
  lookupAttributes: ["guildId"],
  retentionSec: 24 * HOUR,
  stages: [
    stage("send-message", [
      "protocol", "messageId", "guildId", "senderUserId", "notification", "recipients", "readyTimestamp",
    ]),
  ],
});

/** Guild's `points-snapshot` flow. */
export const pointsSnapshot = () => ({
  name: "points-snapshot",
  lookupAttributes: ["guildId"],
  retentionSec: 24 * HOUR,
  stages: [
    stage("take-points-snapshot", ["guildId", "guildPlatformId", "snapshotId", "shouldStatusUpdate"], {
      maxRetries: 10,
    }),
  ],
});

/** Every preset by flow name. */
export const presets = () => ({
  access: access(),
  "status-update": statusUpdate(),
  messaging: messaging(),
  "points-snapshot": pointsSnapshot(),
});
