/**
 * The training algorithms' face: advantages (GRPO, Dr. GRPO, RLOO), the policy loss, the GRPO update,
 * the SFT loop, the learning-rate schedule and shared-prefix packing. Re-exports only.
 */
export { ADVANTAGE_ESTIMATORS, type AdvantageEstimator, computeAdvantages, groupAdvantage, type GroupAdvantages } from "./advantages.js";
export { countMask, type LossAggregation, type LossSequence, policyLoss, type PolicyLossConfig, type PolicyLossResult, sftLoss } from "./policy-loss.js";
export { balanceSuiteAdvantages, type GrpoHparams, type GrpoStepMetrics, grpoUpdate, scaleNegativeAdvantages, type TrainSequence } from "./grpo.js";
export { contextMask, inContextLossPhase, type LeadExtension, leadFirst, type LrSchedule, promptGroups, type SftBatchBy, type SftExample, type SftHparams, type SftStepMetrics, sftSteps, sftTrain } from "./sft.js";
export { learningRateAt } from "./lr-schedule.js";
